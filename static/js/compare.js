// Compare page: every run's train and val curves on one chart, or with "group by" each group's mean validation
// curve and its band (the server computes both: grouped.groups[].curve). The view (x-axis, log scale, band,
// zoomed range, hidden series) lives in the address, so a copied link opens the same view.
"use strict";
function setupCompare() {
  const result = TG.readJSON("compare-data");
  const el = document.getElementById("compare-chart");
  const $ = (id) => document.getElementById(id);
  const params = TG.viewParams();
  const view = {  // from the address, then kept there
    x: params.get("x") || "step", log: params.get("log") === "1", band: params.get("band") || "minmax",
    zoom: (params.get("zoom") || "").split(",").filter(Boolean).map(Number),
    hide: new Set((params.get("hide") || "").split(",").filter(Boolean).map(Number)),
  };
  $("x-axis").value = view.x;
  $("log-scale").checked = view.log;
  if ($("band")) $("band").value = view.band;
  let plot = null;

  function runTables(xKey) {
    const tables = [], series = [];
    result.runs.forEach((r, k) => {  // r.history: the run's rows as columns, thinned by the server
      const h = r.history;
      // rows whose x is not known (another trainer's run that logs no tokens or time) are not drawn on that axis
      const known = h.step.flatMap((_, i) => (h[xKey][i] != null ? [i] : []));
      const evals = known.filter((i) => h.val_loss[i] != null);
      tables.push([known.map((i) => h[xKey][i]), known.map((i) => h.train_loss[i])]);
      tables.push([evals.map((i) => h[xKey][i]), evals.map((i) => h.val_loss[i])]);
      const color = TG.palette[k % TG.palette.length];
      series.push({ label: `#${r.id} train`, stroke: color, width: 1, dash: [4, 3], spanGaps: true });
      series.push({ label: `#${r.id} val (${r.device})`, stroke: color, width: 2, spanGaps: true, points: { show: true, size: 5 } });
    });
    return { tables, series, bands: [] };
  }

  function groupTables(xKey, band) {
    const tables = [], series = [], bands = [];
    result.grouped.groups.forEach((g, k) => {
      const c = g.curve, color = TG.palette[k % TG.palette.length];
      const [low, high] = band === "std" ? [c.std_low, c.std_high] : [c.min, c.max];
      tables.push([c[xKey], c.val_mean, high, low]);
      const n = g.run_ids.length;
      series.push({ label: `${g.label} val mean (${n} run${n === 1 ? "" : "s"})`, stroke: color, width: 2, spanGaps: true, points: { show: true, size: 5 } });
      series.push({ label: `${g.label} ${band === "std" ? "+1 std" : "max"}`, stroke: color, width: 0.5, spanGaps: true });
      series.push({ label: `${g.label} ${band === "std" ? "-1 std" : "min"}`, stroke: color, width: 0.5, spanGaps: true });
      bands.push({ series: [2 + 3 * k, 3 + 3 * k], fill: `${color}33` });
    });
    return { tables, series, bands };
  }

  function chartText() { // the figures the chart shows, as text: each group's last mean, or each run's last val
    if (result.draw === "groups") {
      return "Validation loss by step: " + result.grouped.groups.map((g) => {
        const c = g.curve, n = c.step.length;
        return n ? `${g.label}: mean ${TG.fixed4(c.val_mean[n - 1])} at step ${c.step[n - 1]} (${n} shared evaluation step${n === 1 ? "" : "s"})`
          : `${g.label}: no evaluation all its runs share`;
      }).join("; ");
    }
    return "Loss by step: " + result.runs.map((r) => {
      const h = r.history, evals = h.val_loss.flatMap((v, i) => (v != null ? [i] : []));
      const i = evals[evals.length - 1];
      return evals.length ? `#${r.id} ${r.name}: validation loss ${TG.fixed4(h.val_loss[i])} at step ${h.step[i]}`
        : `#${r.id} ${r.name}: no evaluation yet`;
    }).join("; ");
  }

  function remember() {
    TG.setViewParams({ x: view.x === "step" ? null : view.x, log: view.log, band: view.band === "minmax" ? null : view.band,
                       zoom: view.zoom.length === 2 ? view.zoom.map((v) => +v.toPrecision(6)).join(",") : null,
                       hide: view.hide.size ? [...view.hide].sort((a, b) => a - b).join(",") : null });
  }

  function build() {
    if (plot) plot.destroy();
    el.innerHTML = "";
    const { tables, series, bands } = result.draw === "groups" ? groupTables(view.x, view.band) : runTables(view.x);
    series.forEach((s, i) => { if (view.hide.has(i + 1)) s.show = false; });
    let ready = false;  // hooks fire while the chart is built: only a person's zoom or click is remembered
    plot = TG.chart(el, series, { xLabel: $("x-axis").selectedOptions[0].textContent, xAxis: TG.xAxisFor(view.x),
      yLabel: "loss", log: view.log, bands,
      hooks: {
        setScale: [(u, key) => {
          if (!ready || key !== "x") return;
          const [lo, hi] = [u.scales.x.min, u.scales.x.max], all = u.data[0];
          view.zoom = lo > all[0] || hi < all[all.length - 1] ? [lo, hi] : [];
          remember();
        }],
        setSeries: [(u, i) => {
          if (!ready || i == null) return;
          if (u.series[i].show) view.hide.delete(i); else view.hide.add(i);
          remember();
        }],
      } });
    plot.setData(uPlot.join(tables));
    if (view.zoom.length === 2) plot.setScale("x", { min: view.zoom[0], max: view.zoom[1] });
    el.uplot = plot;  // for the page's tests: the chart as drawn
    TG.describe(el, chartText());
    ready = true;
  }
  $("x-axis").addEventListener("change", () => { view.x = $("x-axis").value; view.zoom = []; remember(); build(); });
  $("log-scale").addEventListener("change", () => { view.log = $("log-scale").checked; remember(); build(); });
  if ($("band")) $("band").addEventListener("change", () => { view.band = $("band").value; remember(); build(); });
  build();
}
document.addEventListener("DOMContentLoaded", () => { if (document.getElementById("compare-data")) setupCompare(); });
