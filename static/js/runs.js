// Runs page: refresh the table when a run is created or changes status (pushed by /api/events).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const source = new EventSource(TG.url("/api/events"));
  let ready = false;
  const refresh = () => htmx.trigger("#runs-table", "refresh");
  // The stream first replays history; only refresh once it is live.
  setTimeout(() => { ready = true; }, 500);
  ["created", "status"].forEach((type) => source.addEventListener(type, () => { if (ready) refresh(); }));
});
