// New-run form: presets fill the fields; an estimate of tokens and passes over the data.
"use strict";
function setupNewRunForm() {
  const presets = TG.readJSON("presets-data");
  const datasets = TG.readJSON("datasets-data");
  const byName = Object.fromEntries(presets.map((p) => [p.name, p]));
  const $ = (sel) => document.querySelector(sel);
  const field = (name) => document.querySelector(`#new-form [name="${name}"]`);

  function update() {
    const preset = byName[field("preset").value];
    if (!preset) return;
    const arch = field("arch").value || preset.default_arch;
    $("#preset-info").textContent =
      `${preset.description} d_model ${preset.d_model}, ${preset.n_layers} layers, ${preset.n_heads} heads, ` +
      `context ${preset.context}, ${preset.params[arch].toLocaleString()} parameters (${arch}).`;
    const steps = +field("steps").value, batch = +field("batch_size").value, accum = +field("grad_accum").value || 1;
    const tokens = steps * batch * accum * preset.context;
    const ds = datasets.find((d) => d.name === field("dataset").value);
    let text = `About ${tokens.toLocaleString()} training tokens`;
    if (ds && ds.bytes) {
      const trainTokens = (ds.bytes / 3.63) * 0.9; // ~3.6 bytes/token for English BPE at 4,096 ids; 90% train split
      text += `, about ${(tokens / trainTokens).toFixed(2)} passes over ${ds.name}`;
    }
    $("#estimate").textContent = text + ".";
  }
  // Choosing a preset fills in its suggested steps, batch size and evaluation interval.
  document.getElementById("new-form").addEventListener("change", (ev) => {
    if (ev.target.name !== "preset") return;
    const preset = byName[ev.target.value];
    for (const [key, value] of Object.entries(preset.training)) field(key).value = value;
    update();
  });
  document.getElementById("new-form").addEventListener("input", update);
  document.body.addEventListener("htmx:afterSwap", update);
  update();
}
document.addEventListener("DOMContentLoaded", setupNewRunForm);
