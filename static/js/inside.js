// The Inside page: draws what the server computed (templates/_inside_result.html's numbers): every head's
// attention as a heatmap, one enlarged, where a hovered token looks; the head scores over training; the
// embedding map. Nothing here decides a number.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const page = TG.readJSON("inside-page");
  const state = { heads: 0, enlarged: null, drawnMs: null, scoresDrawn: false, embeddings: null };
  window.insideState = state;

  // Colours of the heatmaps: the page's accent over its background; the masked future hatched.
  const css = getComputedStyle(document.documentElement);
  const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.trim().slice(i, i + 2), 16));
  const accent = rgb(css.getPropertyValue("--accent") || "#0b6bcb");
  const background = rgb(css.getPropertyValue("--bg") || "#ffffff");
  const hatch = rgb(css.getPropertyValue("--border") || "#d0d7de");

  function attentionOf(data) {
    const text = atob(data.u8), bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    const [L, H, T] = data.shape;
    return { L, H, T, at: (l, h, q, k) => bytes[((l * H + h) * T + q) * T + k], head: (l, h) => bytes.subarray((l * H + h) * T * T, (l * H + h + 1) * T * T) };
  }

  // Each attention byte's pixel and the mask's two, as RGBA words: the accent over the background by the square
  // root of the weight (over a long passage most weights are small; the root shows where a head looks).
  const word = ([r, g, b]) => new Uint32Array(new Uint8ClampedArray([r, g, b, 255]).buffer)[0];
  const strength = (v) => Math.sqrt(v / 255);
  const shades = Uint32Array.from({ length: 256 }, (_, v) => word([0, 1, 2].map((c) => Math.round(background[c] * (1 - strength(v)) + accent[c] * strength(v)))));
  const masked = [word(hatch), word(background)];

  // One head as T x T pixels (drawn scaled up, unsmoothed): row = query, column = key; the future hatched.
  function headImage(att, l, h) {
    const T = att.T, cells = att.head(l, h), image = new ImageData(T, T);
    const pixels32 = new Uint32Array(image.data.buffer);
    for (let q = 0; q < T; q++) {
      const row = q * T;
      for (let k = 0; k <= q; k++) pixels32[row + k] = shades[cells[row + k]];
      for (let k = q + 1; k < T; k++) pixels32[row + k] = masked[(q + k) % 4 < 2 ? 0 : 1];
    }
    const pixels = document.createElement("canvas");
    pixels.width = pixels.height = T;
    pixels.getContext("2d").putImageData(image, 0, 0);
    return pixels;
  }

  function paint(canvas, pixels, size) {
    canvas.width = canvas.height = size;
    const ctx = canvas.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(pixels, 0, 0, size, size);
  }

  function drawGrid(att, data) {
    const grid = $("head-grid");
    const label = (l, h) => `layer ${l} head ${h}: induction ${data.scores.induction[l][h].toFixed(2)}, previous token ${data.scores.previous_token[l][h].toFixed(2)}`;
    for (let l = 0; l < att.L; l++) {
      const row = document.createElement("div");
      row.className = "head-row";
      const name = document.createElement("span");
      name.className = "muted";
      name.textContent = `L${l}`;
      row.append(name);
      for (let h = 0; h < att.H; h++) {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "head-cell";
        button.dataset.layer = l;
        button.dataset.head = h;
        button.title = label(l, h);
        button.setAttribute("aria-label", label(l, h));
        const canvas = document.createElement("canvas");
        paint(canvas, headImage(att, l, h), 96);
        const caption = document.createElement("span");
        caption.textContent = `H${h}`;
        button.append(canvas, caption);
        button.addEventListener("click", () => enlarge(att, data, l, h, true));
        row.append(button);
        state.heads += 1;
      }
      grid.append(row);
    }
  }

  function enlarge(att, data, l, h, remember) {
    state.enlarged = [l, h];
    document.querySelectorAll(".head-cell").forEach((b) => b.setAttribute("aria-pressed", String(+b.dataset.layer === l && +b.dataset.head === h)));
    $("head-large").hidden = false;
    $("head-title").textContent = `Layer ${l}, head ${h} (induction ${data.scores.induction[l][h].toFixed(3)}, previous token ${data.scores.previous_token[l][h].toFixed(3)}, first token ${data.scores.first_token[l][h].toFixed(3)}, entropy ${data.scores.entropy[l][h].toFixed(3)} nats)`;
    paint($("head-canvas"), headImage(att, l, h), Math.max(256, Math.min(640, att.T * 4)));
    if (remember) {
      TG.setViewParams({ layer: l, head: h });
      const form = $("inside-form");
      for (const [name, value] of [["layer", l], ["head", h]]) {
        let input = form.querySelector(`input[name=${name}]`);
        if (!input) { input = document.createElement("input"); input.type = "hidden"; input.name = name; form.append(input); }
        input.value = value;
      }
      const json = new URL($("inside-json").href);
      json.searchParams.set("layer", l);
      json.searchParams.set("head", h);
      $("inside-json").href = json.toString();
    }
  }

  // Hovering the enlarged head: which query looks at which key, and how much.
  function hoverHead(att, data, event) {
    if (!state.enlarged) return;
    const canvas = $("head-canvas"), box = canvas.getBoundingClientRect();
    const q = Math.floor(((event.clientY - box.top) / box.height) * att.T), k = Math.floor(((event.clientX - box.left) / box.width) * att.T);
    if (q < 0 || k < 0 || q >= att.T || k >= att.T) return;
    const [l, h] = state.enlarged;
    $("head-hover").textContent = k > q ? `query ${q} "${data.tokens[q]}" cannot see key ${k} (the future)`
      : `query ${q} "${data.tokens[q]}" looks at key ${k} "${data.tokens[k]}" with weight ${(att.at(l, h, q, k) / 255).toFixed(2)}`;
  }

  // Hovering a token of the passage, with a head enlarged: the tokens it looks at, shaded by the weight.
  function lookFrom(att, span) {
    if (!state.enlarged) return;
    const [l, h] = state.enlarged, q = +span.dataset.i;
    const passage = $("passage");
    passage.classList.add("looking");
    passage.querySelectorAll(".tok").forEach((t) => {
      const k = +t.dataset.i;
      t.style.setProperty("--look", k <= q ? (att.at(l, h, q, k) / 255).toFixed(3) : "0");
    });
    span.classList.add("query");
  }
  function lookAway() {
    const passage = $("passage");
    passage.classList.remove("looking");
    passage.querySelectorAll(".tok.query").forEach((t) => t.classList.remove("query"));
  }

  // Downloads: a canvas as PNG; the enlarged head as SVG (one rectangle a visible cell).
  function download(name, href) {
    const a = document.createElement("a");
    a.href = href;
    a.download = name;
    document.body.append(a);
    a.click();
    a.remove();
  }
  const savePNG = (canvas, name) => canvas.toBlob((blob) => { const href = URL.createObjectURL(blob); download(name, href); setTimeout(() => URL.revokeObjectURL(href), 1000); });
  function headSVG(att, l, h) {
    const ns = "http://www.w3.org/2000/svg", svg = document.createElementNS(ns, "svg"), T = att.T;
    svg.setAttribute("xmlns", ns);
    svg.setAttribute("viewBox", `0 0 ${T} ${T}`);
    svg.setAttribute("width", 640);
    svg.setAttribute("height", 640);
    const masked = document.createElementNS(ns, "path");
    masked.setAttribute("d", `M1 0 H${T} V${T - 1} Z`);
    masked.setAttribute("fill", `rgb(${hatch})`);
    svg.append(masked);
    for (let q = 0; q < T; q++) {
      for (let k = 0; k <= q; k++) {
        const v = att.at(l, h, q, k);
        if (!v) continue;
        const cell = document.createElementNS(ns, "rect");
        for (const [key, value] of [["x", k], ["y", q], ["width", 1], ["height", 1], ["fill", `rgb(${accent})`], ["fill-opacity", strength(v).toFixed(3)]]) cell.setAttribute(key, value);
        svg.append(cell);
      }
    }
    return new XMLSerializer().serializeToString(svg);
  }
  function gridPNG() {
    const cells = [...document.querySelectorAll(".head-cell canvas")];
    const heads = +$("head-grid").style.getPropertyValue("--heads"), rows = cells.length / heads, size = 96, gap = 4;
    const out = document.createElement("canvas");
    out.width = heads * (size + gap);
    out.height = rows * (size + gap);
    const ctx = out.getContext("2d");
    ctx.fillStyle = `rgb(${background})`;
    ctx.fillRect(0, 0, out.width, out.height);
    cells.forEach((c, i) => ctx.drawImage(c, (i % heads) * (size + gap), Math.floor(i / heads) * (size + gap)));
    return out;
  }

  function startAttention() {
    const el = $("inside-attention");
    if (!el) return;
    const data = JSON.parse(el.textContent), att = attentionOf(data);
    drawGrid(att, data);
    if (data.layer != null && data.layer < att.L && data.head < att.H) enlarge(att, data, data.layer, data.head, false);
    $("head-canvas").addEventListener("mousemove", (e) => hoverHead(att, data, e));
    $("passage").querySelectorAll(".tok").forEach((span) => {
      span.addEventListener("mouseenter", () => lookFrom(att, span));
      span.addEventListener("focus", () => lookFrom(att, span));
      span.addEventListener("mouseleave", lookAway);
      span.addEventListener("blur", lookAway);
    });
    $("head-png").addEventListener("click", () => savePNG($("head-canvas"), `run-${page.run_id}-L${state.enlarged[0]}H${state.enlarged[1]}.png`));
    $("head-svg").addEventListener("click", () => {
      const href = URL.createObjectURL(new Blob([headSVG(att, ...state.enlarged)], { type: "image/svg+xml" }));
      download(`run-${page.run_id}-L${state.enlarged[0]}H${state.enlarged[1]}.svg`, href);
      setTimeout(() => URL.revokeObjectURL(href), 1000);
    });
    $("grid-png").addEventListener("click", () => savePNG(gridPNG(), `run-${page.run_id}-heads.png`));
    state.drawnMs = performance.now();  // since the navigation started: request, page and drawing
  }

  // The scores over training: each head's chosen score (right axis) against the validation loss (left).
  function startScores() {
    const el = $("recorded-scores");
    if (!el) return;
    const recorded = JSON.parse(el.textContent), target = $("scores-chart");
    let plot = null;
    function draw() {
      const score = $("score-select").value, per = recorded.scores[score];
      const heads = [];
      for (let l = 0; l < recorded.layers; l++) for (let h = 0; h < recorded.heads; h++) heads.push([l, h]);
      const series = [{ label: "val loss", stroke: TG.palette[1], width: 2 },
        ...heads.map(([l, h]) => ({ label: `L${l}H${h}`, stroke: TG.palette[(l % (TG.palette.length - 2)) + 2], width: 1, scale: "score" }))];
      if (plot) plot.destroy();
      plot = TG.chart(target, series, { xLabel: "step", yLabel: "validation loss", scales: { score: {} },
        extraAxes: [{ scale: "score", side: 1, label: score.replace("_", " "), grid: { show: false },
          values: (u, splits) => splits.map((v) => +v.toPrecision(3)) }] });
      plot.setData([recorded.steps, recorded.val_loss, ...heads.map(([l, h]) => per.map((rows) => rows[l][h]))]);
      const best = per.map((rows) => Math.max(...rows.flat().filter((v) => v != null)));
      TG.describe(target, `${TG.seriesText(`best head's ${score.replace("_", " ")}`, recorded.steps, best, (v) => v.toFixed(3))}; ${TG.seriesText("validation loss", recorded.steps, recorded.val_loss, TG.fixed4)}`);
      state.scoresDrawn = score;
      state.scoresPlot = plot;
    }
    $("score-select").addEventListener("change", () => { TG.setViewParams({ score: $("score-select").value }); draw(); });
    $("scores-png").addEventListener("click", () => savePNG(target.querySelector("canvas"), `run-${page.run_id}-head-scores.png`));
    draw();
  }

  // The embedding map: every token a dot; found ones and a clicked one's neighbours marked.
  function startEmbeddings() {
    const button = $("embeddings-load");
    if (!button) return;
    const canvas = $("embeddings-map"), find = $("embeddings-find"), note = $("embeddings-note");
    let marked = [], neighbours = [];
    const toCanvas = (m) => {
      const pad = 20, xs = m.x, ys = m.y;
      const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
      return (i) => [pad + ((xs[i] - x0) / (x1 - x0 || 1)) * (canvas.width - 2 * pad), canvas.height - pad - ((ys[i] - y0) / (y1 - y0 || 1)) * (canvas.height - 2 * pad)];
    };
    function draw() {
      const m = state.embeddings, at = toCanvas(m), ctx = canvas.getContext("2d");
      ctx.fillStyle = `rgb(${background})`;
      ctx.fillRect(0, 0, canvas.width, canvas.height);
      ctx.fillStyle = `rgba(${accent}, 0.35)`;
      for (let i = 0; i < m.tokens.length; i++) { const [x, y] = at(i); ctx.fillRect(x - 1, y - 1, 2, 2); }
      ctx.font = "13px system-ui, sans-serif";
      for (const [list, colour] of [[neighbours, "#389e0d"], [marked, "#d4380d"]]) {
        ctx.fillStyle = colour;
        for (const i of list) { const [x, y] = at(i); ctx.beginPath(); ctx.arc(x, y, 4, 0, 2 * Math.PI); ctx.fill(); ctx.fillText(JSON.stringify(m.tokens[i]), x + 6, y - 6); }
      }
    }
    button.addEventListener("click", async () => {
      note.textContent = "reading the embeddings…";
      const response = await fetch(TG.url(`/api/runs/${page.run_id}/inside/embeddings?checkpoint=${encodeURIComponent(page.checkpoint)}`));
      const body = await response.json();
      if (!response.ok) { note.textContent = typeof body.detail === "string" ? body.detail : body.detail[0].msg; return; }
      state.embeddings = body;
      canvas.hidden = false;
      find.disabled = false;
      $("embeddings-png").hidden = false;
      button.hidden = true;
      note.textContent = `${body.tokens.length} tokens; the two components explain ${(body.variance_share[0] * 100).toFixed(1)}% and ${(body.variance_share[1] * 100).toFixed(1)}% of the variance`;
      draw();
    });
    find.addEventListener("input", () => {
      const text = find.value, m = state.embeddings;
      if (!m) return;
      const exact = m.tokens.flatMap((t, i) => (t === text ? [i] : []));
      marked = text ? (exact.length ? exact : m.tokens.flatMap((t, i) => (t.includes(text) ? [i] : [])).slice(0, 20)) : [];
      note.textContent = text ? `${marked.length ? marked.length : "no"} token${marked.length === 1 ? "" : "s"} found` : "";
      draw();
    });
    canvas.addEventListener("click", async (e) => {
      const m = state.embeddings, at = toCanvas(m), box = canvas.getBoundingClientRect();
      const px = ((e.clientX - box.left) / box.width) * canvas.width, py = ((e.clientY - box.top) / box.height) * canvas.height;
      let best = 0, bestD = Infinity;
      for (let i = 0; i < m.tokens.length; i++) { const [x, y] = at(i); const d = (x - px) ** 2 + (y - py) ** 2; if (d < bestD) { best = i; bestD = d; } }
      marked = [best];
      const response = await fetch(TG.url(`/api/runs/${page.run_id}/neighbors?word=${encodeURIComponent(m.tokens[best])}&k=8`));
      const list = $("embeddings-neighbours");
      list.replaceChildren();
      if (response.ok) {
        const found = await response.json();
        neighbours = found.map((n) => m.tokens.indexOf(n.token)).filter((i) => i >= 0);
        for (const n of found) { const li = document.createElement("li"); li.textContent = `${JSON.stringify(n.token)} ${n.similarity.toFixed(3)}`; list.append(li); }
        note.textContent = `nearest ${JSON.stringify(m.tokens[best])}`;
      }
      draw();
    });
    $("embeddings-png").addEventListener("click", () => savePNG(canvas, `run-${page.run_id}-embeddings.png`));
  }

  document.addEventListener("DOMContentLoaded", () => { startAttention(); startScores(); startEmbeddings(); });
})();
