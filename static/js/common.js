// Shared helpers for the dashboard pages: JSON from <script> tags, smoothing, downsampling, charts.
"use strict";

window.TG = (() => {
  const readJSON = (id) => JSON.parse(document.getElementById(id).textContent);
  // A link on this dashboard: under the path prefix it is served at behind a proxy (<html data-root>).
  const url = (path) => (document.documentElement.dataset.root || "") + path;

  // Exponential moving average with bias correction (as TensorBoard does), over the whole series.
  function smooth(values, weight) {
    if (!weight) return values.slice();
    let last = 0, n = 0;
    return values.map((v) => {
      if (v == null || !Number.isFinite(v)) return v;
      n += 1;
      last = last * weight + (1 - weight) * v;
      return last / (1 - Math.pow(weight, n));
    });
  }

  // Indices to draw: at most ~maxPoints, keeping each bucket's min and max of `ys` and every index in `keep`.
  function downsampleIndices(ys, maxPoints, keep) {
    const n = ys.length;
    if (n <= maxPoints) return [...Array(n).keys()];
    const out = new Set(keep || []);
    const size = Math.ceil(n / (maxPoints / 2));
    for (let start = 0; start < n; start += size) {
      let lo = start, hi = start;
      for (let i = start; i < Math.min(n, start + size); i++) {
        if (ys[i] == null) continue;
        if (ys[lo] == null || ys[i] < ys[lo]) lo = i;
        if (ys[hi] == null || ys[i] > ys[hi]) hi = i;
      }
      out.add(lo); out.add(hi);
    }
    out.add(n - 1);
    return [...out].sort((a, b) => a - b);
  }

  // Tick labels for small numbers such as learning rates: 5e-4, not a rounded "0.001" twice.
  const scientific = (u, splits) => splits.map((v) => (v === 0 ? "0" : v.toExponential(Math.abs(v) >= 1e-2 ? 2 : 1).replace(/\.0+e/, "e")));

  // Large numbers in SI form (950, 12k, 1.5M, 2.25B): with as many digits as it takes to tell the ticks apart.
  function si(v, digits = 3) {
    const a = Math.abs(v);
    for (const [div, suffix] of [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "k"]]) {
      if (a >= div) return `${+(v / div).toPrecision(digits)}${suffix}`;
    }
    return `${+v.toPrecision(Math.max(digits, 1))}`;
  }
  const distinct = (labels) => new Set(labels).size === labels.length;
  function siValues(u, splits) {
    for (let digits = 3; digits < 9; digits++) {
      const labels = splits.map((v) => si(v, digits));
      if (distinct(labels)) return labels;
    }
    return splits.map((v) => si(v, 9));
  }
  // Seconds of training time: 45s, 12:30 (minutes:seconds), 3:05h (hours:minutes).
  function duration(v) {
    const s = Math.round(v);
    const two = (n) => String(n).padStart(2, "0");
    if (Math.abs(s) < 60) return `${s}s`;
    if (Math.abs(s) < 3600) return `${Math.floor(s / 60)}:${two(s % 60)}`;
    return `${Math.floor(s / 3600)}:${two(Math.floor((s % 3600) / 60))}h`;
  }
  const durationValues = (u, splits) => splits.map(duration);
  // Tick steps for a time axis, in seconds: round minutes and hours, never 1:06.
  const durationIncrs = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
    172800, 604800, 1209600, 2592000];
  // What the x axis of a metrics chart shows for each choice of the x-axis select.
  function xAxisFor(key) {
    return key === "elapsed_sec" ? { values: durationValues, incrs: durationIncrs } : { values: siValues };
  }

  const palette = ["#0b6bcb", "#d4380d", "#389e0d", "#9254de", "#d48806", "#08979c", "#c41d7f", "#595959"];
  const textColor = () => getComputedStyle(document.body).color;

  function chart(el, series, opts) {
    const width = Math.max(260, el.clientWidth || 600);
    const height = el.classList.contains("small") ? 180 : 320;
    const axis = { stroke: textColor(), size: 64, grid: { stroke: "rgba(128,128,128,0.18)" }, ticks: { stroke: "rgba(128,128,128,0.3)" } };
    const xAxis = { ...axis, space: 70, label: opts && opts.xLabel, ...(opts && opts.xSplits ? { splits: opts.xSplits } : {}), ...((opts && opts.xAxis) || {}) };
    const config = {
      width, height,
      scales: { x: { time: false }, y: { distr: opts && opts.log ? 3 : 1 }, ...(opts && opts.scales) },
      axes: [xAxis, { ...axis, label: opts && opts.yLabel, ...(opts && opts.yValues ? { values: opts.yValues } : {}) }, ...((opts && opts.extraAxes) || []).map((a) => ({ ...axis, ...a }))],
      series: [{ label: (opts && opts.xLabel) || "x" }, ...series],
      cursor: { drag: { x: true, y: false, setScale: !(opts && opts.onSelect) } },
      // opts.onSelect(x0, x1): a dragged x range goes to the page (which reads it at full resolution)
      hooks: { ...(opts && opts.onSelect ? { setSelect: [(u) => {
        if (u.select.width > 2) opts.onSelect(u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x"));
        u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
      }] } : {}), ...((opts && opts.hooks) || {}) },
      ...(opts && opts.bands ? { bands: opts.bands } : {}),  // filled areas between two series (a group's spread)
    };
    const data = [[], ...series.map(() => [])];
    const plot = new uPlot(config, data, el);
    new ResizeObserver(() => plot.setSize({ width: Math.max(260, el.clientWidth), height })).observe(el);
    return plot;
  }

  // A chart's text alternative: the figures it shows, read out instead of the picture (role img + aria-label).
  function describe(el, text) {
    el.setAttribute("role", "img");
    el.setAttribute("aria-label", text);
  }
  const fixed4 = (v) => (v == null ? "not logged" : v.toFixed(4));
  const grouped = (v) => Math.round(v).toLocaleString("en-US");
  // "tokens/s by step: 11 rows (steps 0 to 10), from 1,000 to 1,200 (lowest 990, highest 1,250)"
  function seriesText(name, steps, values, fmt = grouped) {
    const at = values.flatMap((v, i) => (v != null && Number.isFinite(v) ? [i] : []));
    if (!at.length) return `${name} by step: nothing yet`;
    const vs = at.map((i) => values[i]);
    return `${name} by step: ${at.length} rows (steps ${steps[at[0]]} to ${steps[at[at.length - 1]]}), from ` +
      `${fmt(vs[0])} to ${fmt(vs[vs.length - 1])} (lowest ${fmt(Math.min(...vs))}, highest ${fmt(Math.max(...vs))})`;
  }

  // One redraw per animation frame, however many events arrive.
  function throttle(fn) {
    let queued = false;
    return () => {
      if (queued) return;
      queued = true;
      requestAnimationFrame(() => { queued = false; fn(); });
    };
  }

  // A view's state in the page's address (so a copied link opens the same view): read once, written on change.
  const viewParams = () => new URLSearchParams(location.search);
  function setViewParams(values) {
    const params = viewParams();
    for (const [k, v] of Object.entries(values)) {
      if (v == null || v === "" || v === false) params.delete(k); else params.set(k, v === true ? "1" : String(v));
    }
    history.replaceState(null, "", `${location.pathname}?${params.toString().replace(/%2C/g, ",")}`);
  }

  return { readJSON, url, smooth, viewParams, setViewParams, downsampleIndices, chart, describe, seriesText, fixed4, palette, throttle, scientific, si, siValues, duration,
    durationValues, xAxisFor };
})();
