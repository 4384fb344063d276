// Run page: the run's history in one request (thinned by the server), then live rows from its event stream;
// charts that zoom into a step range at full resolution, overfitting banner, sample box, neighbours.
"use strict";

const MAX_POINTS = 2000; // points drawn per series; the data itself is never dropped

function setupRunPage() {
  const run = TG.readJSON("run-data");
  const $ = (id) => document.getElementById(id);
  // rows: the history (thinned past ~2 rows a pixel column) and every live row since; zoom: a range's rows
  const state = { rows: [], lastEventId: 0, status: run.status, best: null, received: [], zoom: null, loaded: false,
    target: run.time_to_target, targetValue: run.target_val_loss }; // target: when the server says it was reached
  window.runState = state; // for tests and the curious

  // -- charts -------------------------------------------------------------------------------
  const charts = {};
  state.charts = charts; // the tests read the drawn tick labels
  function buildCharts() {
    for (const c of Object.values(charts)) c.destroy();
    for (const id of ["loss-chart", "tps-chart", "mem-chart", "lr-chart"]) $(id).innerHTML = "";
    const xLabel = $("x-axis").selectedOptions[0].textContent;
    const xAxis = TG.xAxisFor($("x-axis").value);
    const log = $("log-scale").checked;
    charts.loss = TG.chart($("loss-chart"), [
      { label: "train", stroke: TG.palette[0], width: 1.5 },
      { label: "val", stroke: TG.palette[1], width: 2, spanGaps: true, points: { show: true, size: 5 } },
      { label: "gap (val − train)", stroke: TG.palette[4], fill: "rgba(212,136,6,0.15)", scale: "gap", spanGaps: true },
      { label: "best val", stroke: TG.palette[2], width: 0, points: { show: true, size: 11, fill: TG.palette[2] } },
      { label: "target", stroke: TG.palette[7], width: 1, dash: [6, 4] },
      { label: "reached target", stroke: TG.palette[6], width: 0, points: { show: true, size: 13, fill: TG.palette[6] } },
    ], { xLabel, xAxis, yLabel: "loss", log, scales: { gap: {} }, extraAxes: [{ scale: "gap", side: 1, label: "gap" }], onSelect: zoomTo });
    charts.tps = TG.chart($("tps-chart"), [{ label: "tok/s", stroke: TG.palette[3] }], { xLabel, xAxis, yValues: TG.siValues, onSelect: zoomTo });
    charts.mem = TG.chart($("mem-chart"), [{ label: "MiB", stroke: TG.palette[5] }], { xLabel, xAxis, yValues: TG.siValues, onSelect: zoomTo });
    charts.lr = TG.chart($("lr-chart"), [{ label: "lr", stroke: TG.palette[6] }], { xLabel, xAxis, yValues: TG.scientific, onSelect: zoomTo });
    draw();
  }

  function draw() {
    const rows = state.zoom ? state.zoom.rows : state.rows;
    const xKey = $("x-axis").value;
    const weight = +$("smoothing").value;
    const train = TG.smooth(rows.map((r) => r.train_loss), weight);
    const evalIdx = rows.flatMap((r, i) => (r.val_loss != null ? [i] : []));
    const idx = TG.downsampleIndices(train, MAX_POINTS, evalIdx);
    const pick = (arr) => idx.map((i) => arr[i]);
    const xs = pick(rows.map((r) => r[xKey]));
    const val = rows.map((r) => r.val_loss);
    const gap = rows.map((r) => (r.val_loss != null && r.train_loss != null ? r.val_loss - r.train_loss : null));
    const bestStep = state.overfit ? state.overfit.best_step : null; // the server's verdict: the best evaluation
    const best = rows.map((r) => (r.step === bestStep && r.val_loss != null ? r.val_loss : null));
    const targetLine = rows.map(() => state.targetValue ?? null);
    const reachedStep = state.target ? state.target.step : null; // the server's: the first whole-split loss under it
    const reached = rows.map((r) => (r.step === reachedStep && r.val_loss != null ? r.val_loss : null));
    charts.loss.setData([xs, pick(train), pick(val), pick(gap), pick(best), pick(targetLine), pick(reached)]);
    state.drawnPoints = xs.length;
    const nonzero = rows.flatMap((r, i) => (r.tokens_per_sec > 0 ? [i] : []));
    const tIdx = nonzero.length > MAX_POINTS ? nonzero.filter((_, k) => k % Math.ceil(nonzero.length / MAX_POINTS) === 0) : nonzero;
    charts.tps.setData([tIdx.map((i) => rows[i][xKey]), tIdx.map((i) => rows[i].tokens_per_sec)]);
    charts.mem.setData([xs, pick(rows.map((r) => r.peak_mem_mib))]);
    charts.lr.setData([xs, pick(rows.map((r) => r.lr))]);
    describeCharts(rows);
  }

  function describeCharts(rows) { // the figures the charts show, as text (screen readers, no picture)
    const steps = rows.map((r) => r.step);
    TG.describe($("loss-chart"), lossText(rows));
    TG.describe($("tps-chart"), TG.seriesText("tokens/s", steps, rows.map((r) => (r.tokens_per_sec > 0 ? r.tokens_per_sec : null))));
    TG.describe($("mem-chart"), TG.seriesText("peak memory (MiB)", steps, rows.map((r) => r.peak_mem_mib)));
    TG.describe($("lr-chart"), TG.seriesText("learning rate", steps, rows.map((r) => r.lr), (v) => v.toExponential(2)));
  }

  function lossText(rows) { // "Loss by step: 11 training rows (steps 0 to 10), train loss 5.0000 at step 0 to ..."
    if (!rows.length) return "Loss by step: nothing yet";
    const first = rows[0], last = rows[rows.length - 1];
    const evals = rows.filter((r) => r.val_loss != null);
    let text = `Loss by step: ${rows.length} training rows (steps ${first.step} to ${last.step}), train loss ` +
      `${TG.fixed4(first.train_loss)} at step ${first.step} to ${TG.fixed4(last.train_loss)} at step ${last.step}`;
    if (evals.length) {
      const a = evals[0], b = evals[evals.length - 1];
      const best = evals.reduce((m, r) => (r.val_loss < m.val_loss ? r : m));
      text += `; validation loss ${TG.fixed4(a.val_loss)} at step ${a.step}` +
        (evals.length > 1 ? ` to ${TG.fixed4(b.val_loss)} at step ${b.step}` : "") +
        ` (best ${TG.fixed4(best.val_loss)} at step ${best.step})`;
    }
    return text;
  }
  const redraw = TG.throttle(draw);

  // -- what the numbers say ------------------------------------------------------------------
  function updateProgress() {
    const last = state.rows[state.rows.length - 1];
    if (!last) return;
    $("progress").value = last.step;
    $("progress-text").textContent = `${last.step} / ${run.steps}`;
    if (state.status === "running" && last.step > 0 && last.elapsed_sec > 0) {
      const secs = ((run.steps - last.step) * last.elapsed_sec) / last.step;
      $("eta").textContent = `ETA ${secs < 90 ? Math.round(secs) + " s" : Math.round(secs / 60) + " min"}`;
    } else {
      $("eta").textContent = "";
    }
  }

  function showOverfit(verdict) { // the server's verdict (tinygpt.records.OverfitWatch): drawn, never re-decided here
    state.overfit = verdict;
    const banner = $("banner");
    banner.hidden = !(verdict && verdict.since != null);
    if (!banner.hidden) {
      banner.textContent = `Overfitting since step ${verdict.since}; best checkpoint is step ${verdict.best_step} (val ${verdict.best_val_loss.toFixed(4)}).`;
    }
  }

  function setStatus(data) {
    state.status = data.status;
    if (data.worker) {
      const host = data.worker_host && !data.worker.includes(data.worker_host) ? ` on ${data.worker_host}` : "";
      $("worker-desc").textContent = `worker ${data.worker}${host}`;
      $("worker-desc").hidden = false;
    }
    const badge = $("run-status");
    badge.textContent = data.status;
    badge.className = `status status-${data.status}`;
    $("cancel-btn").hidden = !run.stoppable || !["queued", "running"].includes(data.status); // run.stoppable: the server's
    if (data.stop_reason) { $("stop-banner").textContent = data.stop_reason; $("stop-banner").hidden = false; }
    if (data.status !== "running") $("stall-banner").hidden = true;
    if (data.error) { $("error").textContent = data.error; $("error").hidden = false; }
    else if (data.status === "running") $("error").hidden = true;
  }

  function addListItem(listId, parts) {
    const li = document.createElement("li");
    for (const [tag, text, cls] of parts) {
      const el = document.createElement(tag);
      el.textContent = text;
      if (cls) el.className = cls;
      li.appendChild(el);
    }
    $(listId).appendChild(li);
  }

  // -- history, then the event stream from its end (EventSource reconnects by itself, sending Last-Event-ID) --
  const historyPoints = () => Math.min(100000, Math.max(1000, 2 * Math.round($("loss-chart").clientWidth || 1000)));
  async function readHistory(params) {
    const query = new URLSearchParams({ format: "columns", max_points: historyPoints(), ...params });
    const response = await fetch(TG.url(`/api/runs/${run.id}/metrics?${query}`));
    if (!response.ok) throw new Error(`the run's history could not be read (HTTP ${response.status})`);
    const h = await response.json();
    const keys = Object.keys(h.columns);
    h.rows = h.columns.step.map((_, i) => Object.fromEntries(keys.map((k) => [k, h.columns[k][i]])));
    return h;
  }

  function showError(err) { $("error").textContent = err.message; $("error").hidden = false; }
  async function start(after) { // the history (again, after a gap), then the stream from where it ends
    const h = await readHistory({});
    state.rows = h.rows;
    state.downsampled = h.downsampled;
    state.historyEventId = h.last_event_id;
    state.loaded = true;
    updateProgress();
    showOverfit(h.overfit);
    if (linkedZoom.length === 2 && !state.zoom) await zoomSteps(linkedZoom[0], linkedZoom[1]);
    redraw();
    listen(new EventSource(TG.url(`/api/runs/${run.id}/events?`) + new URLSearchParams({ after, history: h.last_event_id })));
  }

  const fresh = (e) => {
    const id = +e.lastEventId;
    state.received.push(id); // every id as it arrived (the tests check none comes twice)
    if (id && id <= state.lastEventId) return false; // never apply an event twice
    if (id) state.lastEventId = id;
    return true;
  };
  function listen(source) {
    source.addEventListener("metric", (e) => {
      if (!fresh(e)) return;
      const m = JSON.parse(e.data);
      // a resumed run repeats steps after its checkpoint (and a row read with the history may come again):
      // the newer row replaces the older
      while (state.rows.length && state.rows[state.rows.length - 1].step >= m.step) state.rows.pop();
      state.rows.push(m);
      updateProgress();
      redraw();
    });
    source.addEventListener("gap", () => { // rows we missed left the outbox: read the history again
      source.close();
      state.gaps = (state.gaps || 0) + 1;
      start(state.lastEventId).catch(showError);
    });
    source.addEventListener("overfit", (e) => { // each evaluation's verdict
      if (!fresh(e)) return;
      showOverfit(JSON.parse(e.data));
      redraw();
    });
    source.addEventListener("sample", (e) => { // the page was rendered with the samples up to rendered_event_id
      if (!fresh(e) || +e.lastEventId <= run.rendered_event_id) return;
      const s = JSON.parse(e.data);
      addListItem("samples", [["span", `step ${s.step}`, "muted"], ["pre", s.text]]);
    });
    source.addEventListener("log", (e) => {
      if (!fresh(e)) return;
      const d = JSON.parse(e.data);
      addListItem("log", [["span", d.message]]);
    });
    source.addEventListener("resolved", (e) => { // what the job resolved: device, precision, size
      if (!fresh(e)) return;
      const d = JSON.parse(e.data);
      const name = d.device_info && d.device_info.name ? ` · ${d.device_info.name}` : "";
      $("device-desc").textContent = `${d.device}${name} · ${d.precision} · ${d.params.toLocaleString()} parameters`;
      if (d.target_val_loss != null && state.targetValue == null) {
        state.targetValue = d.target_val_loss;
        $("target-line").textContent = d.target_line;
        $("target-line").hidden = false;
        redraw();
      }
    });
    source.addEventListener("best_checkpoint", (e) => {
      if (!fresh(e)) return;
      $("model-files").hidden = false;
      const d = JSON.parse(e.data);
      $("best-val").textContent = `best val ${d.val_loss.toFixed(4)} at step ${d.step}` +
        (d.val_bpb != null ? ` · ${d.val_bpb.toFixed(3)} bits per byte` : "");
    });
    source.addEventListener("target", (e) => { // the run reached its target (time to target)
      if (!fresh(e)) return;
      state.target = JSON.parse(e.data);
      $("target-line").textContent = state.target.line;
      $("target-line").hidden = false;
      redraw();
    });
    source.addEventListener("status", (e) => {
      if (!fresh(e)) return;
      setStatus(JSON.parse(e.data));
      updateProgress();
    });
    source.addEventListener("stall", (e) => { // the worker saw no step for too long (stalled), or steps again
      if (!fresh(e)) return;
      const d = JSON.parse(e.data);
      $("stall-banner").textContent = d.stalled ? `Stalled: ${d.message}.` : "";
      $("stall-banner").hidden = !d.stalled;
    });
    source.addEventListener("alert", (e) => { // a desktop notification for what happens after the page opened
      if (!fresh(e) || +e.lastEventId <= run.rendered_event_id) return;
      const d = JSON.parse(e.data);
      if (window.Notification && Notification.permission === "granted") {
        new Notification(`${run.name}: ${d.kind.replace("_", " ")}`, { body: d.message, tag: `run-${run.id}-${e.lastEventId}` });
      }
    });
    source.addEventListener("end", () => { source.close(); state.ended = true; });
  }

  // -- zoom: a dragged x range, at full resolution (read from the server when the history was thinned) ------
  async function zoomTo(x0, x1) {
    const xKey = $("x-axis").value;
    const inside = state.rows.filter((r) => r[xKey] >= x0 && r[xKey] <= x1);
    if (inside.length) await zoomSteps(inside[0].step, inside[inside.length - 1].step);
  }
  async function zoomSteps(from, to) {
    let rows = state.rows.filter((r) => r.step >= from && r.step <= to);
    if (state.downsampled) rows = (await readHistory({ from_step: from, to_step: to })).rows;
    if (!rows.length) return;
    state.zoom = { from: rows[0].step, to: rows[rows.length - 1].step, rows };
    $("zoom-reset").hidden = false;
    rememberView();
    redraw();
  }
  $("zoom-reset").addEventListener("click", () => { state.zoom = null; $("zoom-reset").hidden = true; rememberView(); redraw(); });

  // -- the view in the address (x-axis, log scale, smoothing, zoomed steps): a copied link opens the same view --
  const view = TG.viewParams();
  if (view.get("x")) $("x-axis").value = view.get("x");
  $("log-scale").checked = view.get("log") === "1";
  if (view.get("smooth")) { $("smoothing").value = view.get("smooth"); $("smoothing-value").textContent = $("smoothing").value; }
  const linkedZoom = (view.get("zoom") || "").split(",").filter(Boolean).map(Number);  // applied once the history is in
  function rememberView() {
    TG.setViewParams({ x: $("x-axis").value === "step" ? null : $("x-axis").value, log: $("log-scale").checked,
                       smooth: +$("smoothing").value ? $("smoothing").value : null,
                       zoom: state.zoom ? `${state.zoom.from},${state.zoom.to}` : null });
  }

  // -- controls ---------------------------------------------------------------------------
  if (window.Notification && Notification.permission !== "denied") {
    const button = $("notify-btn");
    button.hidden = Notification.permission === "granted";
    button.addEventListener("click", async () => { button.hidden = (await Notification.requestPermission()) === "granted"; });
  }
  $("x-axis").addEventListener("change", () => { rememberView(); buildCharts(); });
  $("log-scale").addEventListener("change", () => { rememberView(); buildCharts(); });
  $("smoothing").addEventListener("input", () => { $("smoothing-value").textContent = $("smoothing").value; rememberView(); redraw(); });
  $("cancel-btn").addEventListener("click", async () => {
    const r = await fetch(TG.url(`/api/runs/${run.id}/cancel`), { method: "POST" });
    if (!r.ok) alert((await r.json()).detail);
  });
  $("rename-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const tags = String(f.get("tags")).split(",").map((t) => t.trim()).filter(Boolean);
    const r = await fetch(TG.url(`/api/runs/${run.id}`), {
      method: "PATCH", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ name: f.get("name"), tags }),
    });
    if (r.ok) $("run-name").textContent = (await r.json()).name;
  });

  $("sample-form")?.addEventListener("submit", async (ev) => { // absent for readers who may not ask the model
    ev.preventDefault();
    const f = new FormData(ev.target);
    const body = { prompt: f.get("prompt"), max_tokens: +f.get("max_tokens"), temperature: +f.get("temperature") };
    for (const k of ["top_k", "top_p", "seed"]) if (f.get(k) !== "") body[k] = +f.get(k);
    const out = $("sample-output");
    out.textContent = body.prompt;
    $("sample-btn").disabled = true;
    try {
      const r = await fetch(TG.url(`/api/runs/${run.id}/sample`), {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      });
      if (!r.ok) { const d = await r.json(); out.textContent = typeof d.detail === "string" ? d.detail : d.detail.map((x) => x.msg).join("; "); return; }
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
          const event = (block.match(/^event: (.*)$/m) || [])[1];
          const data = block.split(/\r?\n/).filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
          if (event === "token") out.textContent += JSON.parse(data).text;
          if (event === "error") out.textContent += `\n[error: ${JSON.parse(data).message}]`;
        }
      }
    } finally {
      $("sample-btn").disabled = false;
    }
  });

  $("neighbours-form")?.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const word = new FormData(ev.target).get("word");
    const r = await fetch(TG.url(`/api/runs/${run.id}/neighbors?`) + new URLSearchParams({ word, k: 10 }));
    const list = $("neighbours");
    list.innerHTML = "";
    const d = await r.json();
    if (!r.ok) { addListItem("neighbours", [["span", typeof d.detail === "string" ? d.detail : d.detail[0].msg]]); return; }
    for (const n of d) addListItem("neighbours", [["code", JSON.stringify(n.token)], ["span", ` ${n.similarity.toFixed(3)}`]]);
  });

  // -- another trainer's own series (the names not mapped onto the run's columns): one small chart each ------
  async function drawOwnSeries() {
    const els = document.querySelectorAll(".series-chart");
    if (!els.length) return;
    const response = await fetch(TG.url(`/api/runs/${run.id}/series?max_points=${MAX_POINTS}`));
    if (!response.ok) throw new Error(`the run's series could not be read (HTTP ${response.status})`);
    const byName = Object.fromEntries((await response.json()).map((s) => [s.name, s]));
    state.seriesCharts = [];
    els.forEach((el, k) => {
      const s = byName[el.dataset.series];
      if (!s) return;
      const plot = TG.chart(el, [{ label: s.name, stroke: TG.palette[k % TG.palette.length] }], { xLabel: "step", yValues: TG.siValues });
      plot.setData([s.steps, s.values]);
      TG.describe(el, TG.seriesText(s.name, s.steps, s.values));
      state.seriesCharts.push(plot);
    });
  }

  buildCharts();
  start(0).catch(showError);
  drawOwnSeries().catch(showError);
}

document.addEventListener("DOMContentLoaded", setupRunPage);
