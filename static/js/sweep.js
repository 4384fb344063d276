// The sweep page: every trial's validation curve (uPlot), parallel coordinates and option importance
// (ECharts), the trials table re-rendered by the server (htmx) as the sweep's stream reports trials.
"use strict";

(() => {
  let sweep = TG.readJSON("sweep-data");
  const curves = new Map(); // run id -> Map(step -> val loss)
  let plot = null, plotKey = "";
  const parallel = echarts.init(document.getElementById("parallel"));
  const importance = echarts.init(document.getElementById("importance"));
  new ResizeObserver(() => { parallel.resize(); importance.resize(); }).observe(document.getElementById("parallel"));

  const trialsByRun = () => new Map(sweep.trials.map((t) => [t.run_id, t]));
  const bestRun = () => (sweep.best ? sweep.best.run_id : null);

  // -- curves: one series per trial, pruned ones faded, the best one bold -----------------------------
  function drawCurves() {
    const trials = sweep.trials.filter((t) => curves.has(t.run_id));
    const steps = [...new Set(trials.flatMap((t) => [...curves.get(t.run_id).keys()]))].sort((a, b) => a - b);
    const key = trials.map((t) => `${t.run_id}:${t.status}`).join(",") + `|${bestRun()}`;
    if (key !== plotKey) {
      if (plot) plot.destroy();
      const el = document.getElementById("curves");
      const series = trials.map((t, i) => ({
        label: `trial ${t.trial}` + ((sweep.config.seeds || 1) > 1 ? ` · seed ${t.seed}` : ""),
        stroke: TG.palette[i % TG.palette.length] + (t.status === "pruned" ? "55" : ""),
        width: t.run_id === bestRun() ? 3 : 1.2,
        dash: t.status === "pruned" ? [4, 4] : undefined,
        spanGaps: true,
      }));
      plot = TG.chart(el, series, { xLabel: "step", xAxis: TG.xAxisFor("step"), yLabel: "val loss" });
      plotKey = key;
    }
    plot.setData([steps, ...trials.map((t) => steps.map((s) => curves.get(t.run_id).get(s) ?? null))]);
  }

  async function loadCurve(runId) { // a thinned history keeps every evaluation: the whole validation curve
    const response = await fetch(TG.url(`/api/runs/${runId}/metrics?format=columns&max_points=200`));
    if (!response.ok) return;
    const { columns } = await response.json();
    const points = curves.get(runId) || new Map();
    columns.step.forEach((step, i) => { if (columns.val_loss[i] != null) points.set(step, columns.val_loss[i]); });
    curves.set(runId, points);
  }

  // -- parallel coordinates and importance ---------------------------------------------------------------
  function drawCharts() {
    const params = sweep.trials.length ? Object.keys(sweep.trials[0].params) : [];
    const finished = sweep.trials.filter((t) => t.best_val_loss != null && !["queued", "running"].includes(t.status));
    const axes = [...params, "best val"].map((name, dim) => {
      const values = finished.map((t) => (dim < params.length ? t.params[name] : t.best_val_loss));
      const numeric = values.every((v) => typeof v === "number");
      return numeric ? { dim, name, scale: true } : { dim, name, type: "category", data: [...new Set(values.map(String))] };
    });
    parallel.setOption({
      animation: false,
      tooltip: { trigger: "item", formatter: (p) => `trial ${p.data.trial} (${p.data.status})` },
      parallelAxis: axes,
      parallel: { left: 40, right: 70, top: 30, bottom: 30 },
      series: [{
        type: "parallel",
        data: finished.map((t) => ({
          value: [...params.map((p) => t.params[p]), t.best_val_loss], trial: t.trial, status: t.status,
          lineStyle: { width: t.run_id === bestRun() ? 4 : 1.5, opacity: t.status === "pruned" ? 0.25 : 0.8,
                       color: t.run_id === bestRun() ? "#d4380d" : "#0b6bcb" },
        })),
      }],
    }, true);
    const ranked = Object.entries(sweep.importance || {}).sort((a, b) => a[1] - b[1]);
    importance.setOption({
      animation: false,
      grid: { left: 110, right: 30, top: 10, bottom: 30 },
      xAxis: { type: "value", max: 1 },
      yAxis: { type: "category", data: ranked.map(([k]) => k) },
      series: [{ type: "bar", data: ranked.map(([, v]) => v), label: { show: true, position: "right", formatter: (p) => p.value.toFixed(2) } }],
    }, true);
    importance.getDom().hidden = !sweep.importance;  // no empty axes before the server has an importance
    importance.resize();
    document.getElementById("importance-note").textContent = sweep.importance
      ? "fANOVA over the completed trials." : "Shown once 4 trials have completed.";
  }

  // -- live: the sweep's stream ---------------------------------------------------------------------------
  let refreshTimer = null;
  function refreshSoon() {  // one refresh for a burst of events
    if (refreshTimer) return;
    refreshTimer = setTimeout(async () => {
      refreshTimer = null;
      const response = await fetch(TG.url(`/api/sweeps/${sweep.id}`));
      if (response.ok) sweep = await response.json();
      document.getElementById("sweep-status").textContent = sweep.status;
      document.getElementById("sweep-status").className = `status status-${sweep.status}`;
      const cancel = document.getElementById("cancel-sweep");
      if (cancel && sweep.status !== "running") cancel.remove();
      document.body.dispatchEvent(new CustomEvent("sweep-changed"));
      drawCurves();
      drawCharts();
    }, 300);
  }

  const source = new EventSource(TG.url(`/api/sweeps/${sweep.id}/events`));
  source.addEventListener("trial", (e) => {
    const d = JSON.parse(e.data);
    if (d.kind === "evaluated" || d.kind === "pruned") {
      if (!curves.has(d.run_id)) curves.set(d.run_id, new Map());
      curves.get(d.run_id).set(d.step, d.val_loss);
      if (!trialsByRun().has(d.run_id)) { refreshSoon(); return; }
      drawCurves();
    }
    if (d.kind === "finished") { loadCurve(d.run_id).then(refreshSoon); return; }  // the whole curve, step 0 too
    refreshSoon();  // the table moves with the curves: its best val and step come from the server
  });
  source.addEventListener("sweep", refreshSoon);
  source.addEventListener("end", () => { source.close(); refreshSoon(); });

  // -- the trials table sorts by a column on click (it is re-rendered by htmx: listen on the document) ------
  document.addEventListener("click", (e) => {
    const th = e.target.closest("#trials-table th[data-sort]");
    if (!th) return;
    const table = th.closest("table"), index = [...th.parentNode.children].indexOf(th);
    const descending = th.dataset.dir !== "desc" && th.dataset.dir === "asc";
    th.parentNode.querySelectorAll("th").forEach((h) => delete h.dataset.dir);
    th.dataset.dir = descending ? "desc" : "asc";
    const value = (row) => row.children[index].dataset.value;
    const rows = [...table.tBodies[0].rows];
    rows.sort((a, b) => {
      const [x, y] = [value(a), value(b)];
      const order = th.dataset.sort === "num" ? (x === "" ? Infinity : +x) - (y === "" ? Infinity : +y) : x.localeCompare(y);
      return descending ? -order : order;
    });
    rows.forEach((r) => table.tBodies[0].appendChild(r));
  });

  Promise.all(sweep.trials.map((t) => loadCurve(t.run_id))).then(() => { drawCurves(); drawCharts(); });
})();
