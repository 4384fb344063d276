// Compare page: every run's train and val curves on one chart (same x-axis switch as the run page).
"use strict";
function setupCompare() {
  const result = TG.readJSON("compare-data");
  const el = document.getElementById("compare-chart");
  let plot = null;
  function build() {
    if (plot) plot.destroy();
    el.innerHTML = "";
    const xKey = document.getElementById("x-axis").value;
    const tables = [];
    const series = [];
    result.runs.forEach((r, k) => {  // r.history: the run's rows as columns, thinned by the server
      const h = r.history;
      const evals = h.val_loss.flatMap((v, i) => (v != null ? [i] : []));
      tables.push([h[xKey], h.train_loss]);
      tables.push([evals.map((i) => h[xKey][i]), evals.map((i) => h.val_loss[i])]);
      const color = TG.palette[k % TG.palette.length];
      series.push({ label: `#${r.id} train`, stroke: color, width: 1, dash: [4, 3], spanGaps: true });
      series.push({ label: `#${r.id} val (${r.device})`, stroke: color, width: 2, spanGaps: true, points: { show: true, size: 5 } });
    });
    const data = uPlot.join(tables);
    plot = TG.chart(el, series, { xLabel: document.getElementById("x-axis").selectedOptions[0].textContent,
                                   xAxis: TG.xAxisFor(xKey), yLabel: "loss",
                                   log: document.getElementById("log-scale").checked });
    plot.setData(data);
  }
  document.getElementById("x-axis").addEventListener("change", build);
  document.getElementById("log-scale").addEventListener("change", build);
  build();
}
document.addEventListener("DOMContentLoaded", () => { if (document.getElementById("compare-data")) setupCompare(); });
