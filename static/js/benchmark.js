// Benchmark page: throughput against batch size (one line per precision), thread scaling,
// and the cells table; all refreshed as the worker reports each cell.
"use strict";
function setupBenchmarkPage() {
  let bench = TG.readJSON("benchmark-data");
  const id = bench.run.id;
  const $ = (sel) => document.querySelector(sel);
  let batchPlot = null, threadsPlot = null;

  // Best tokens/s per (precision, batch size) over thread counts.
  function batchSeries(cells) {
    const ok = cells.filter((c) => !c.oom);
    const precisions = [...new Set(cells.map((c) => c.precision))];
    const batches = [...new Set(cells.map((c) => c.batch_size))].sort((a, b) => a - b);
    const ys = precisions.map((p) => batches.map((b) => {
      const rates = ok.filter((c) => c.precision === p && c.batch_size === b).map((c) => c.tokens_per_sec);
      return rates.length ? Math.max(...rates) : null;
    }));
    return { precisions, batches, ys };
  }

  // tokens/s against thread count, one line per (precision, batch size).
  function threadSeries(cells) {
    const threads = [...new Set(cells.filter((c) => c.threads).map((c) => c.threads))].sort((a, b) => a - b);
    const keys = [...new Set(cells.map((c) => `${c.precision} batch ${c.batch_size}`))];
    const ys = keys.map((k) => threads.map((t) => {
      const c = cells.find((c) => `${c.precision} batch ${c.batch_size}` === k && c.threads === t && !c.oom);
      return c ? c.tokens_per_sec : null;
    }));
    return { threads, keys, ys };
  }

  function draw() {
    const b = batchSeries(bench.cells);
    if (batchPlot) batchPlot.destroy();
    batchPlot = TG.chart($("#batch-chart"),
      b.precisions.map((p, i) => ({ label: p, stroke: TG.palette[i % TG.palette.length], width: 2, points: { show: true, size: 7 } })),
      { xLabel: "batch size", yLabel: "tokens/s", xSplits: () => b.batches });
    batchPlot.setData([b.batches, ...b.ys]);
    const t = threadSeries(bench.cells);
    $("#threads-section").hidden = t.threads.length < 2;
    if (t.threads.length >= 2) {
      if (threadsPlot) threadsPlot.destroy();
      threadsPlot = TG.chart($("#threads-chart"),
        t.keys.map((k, i) => ({ label: k, stroke: TG.palette[i % TG.palette.length], width: 2, points: { show: true, size: 7 } })),
        { xLabel: "threads", yLabel: "tokens/s", xSplits: () => t.threads });
      threadsPlot.setData([t.threads, ...t.ys]);
    }
  }

  function showRun(run) {
    const status = $("#run-status");
    status.textContent = run.status;
    status.className = `status status-${run.status}`;
    const total = run.steps || 0;
    $("#progress").max = total || 1;
    $("#progress").value = bench.cells.length;
    $("#progress-text").textContent = `${bench.cells.length} / ${total || "?"} cells`;
    $("#cancel-btn").hidden = !["queued", "running"].includes(run.status);
    if (run.error) { $("#error").textContent = run.error; $("#error").hidden = false; }
  }

  const refresh = TG.throttle(async () => {
    const response = await fetch(TG.url(`/api/benchmarks/${id}`));
    if (!response.ok) return;
    bench = await response.json();
    showRun(bench.run);
    draw();
    htmx.ajax("GET", TG.url(`/partials/benchmarks/${id}/cells`), { target: "#cells", swap: "innerHTML" });
  });

  $("#cancel-btn").addEventListener("click", async () => {
    await fetch(TG.url(`/api/runs/${id}/cancel`), { method: "POST" });
  });

  draw();
  showRun(bench.run);
  if (["queued", "running"].includes(bench.run.status)) {
    const source = new EventSource(TG.url(`/api/runs/${id}/events`));
    for (const type of ["log", "status"]) source.addEventListener(type, refresh);
    source.addEventListener("end", () => { source.close(); refresh(); });
  }
}
document.addEventListener("DOMContentLoaded", setupBenchmarkPage);
