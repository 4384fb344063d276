// New-run form: presets and recipes fill the fields; an estimate of tokens, passes over the data and,
// from this machine's benchmark results, the training time.
"use strict";
function setupNewRunForm() {
  const presets = TG.readJSON("presets-data");
  // device -> its kind, recipe -> the form's values there for the options recipes set, recipe -> what it is for
  // there (the server's: tinygpt.recipes.guide)
  const recipes = TG.readJSON("recipes-data");
  const datasets = TG.readJSON("datasets-data");
  const speeds = TG.readJSON("speed-data");
  const byName = Object.fromEntries(presets.map((p) => [p.name, p]));

  // Measured tokens/s for this preset, device and precision at the nearest benchmarked batch size.
  function measuredSpeed(preset, device, precision, batch) {
    const devices = device === "auto" ? null : [device, device === "cuda" ? "cuda:0" : device];
    const rows = speeds.filter((s) => s.preset === preset && (!devices || devices.includes(s.device)) &&
      (precision === "auto" || s.precision === precision));
    if (!rows.length) return null;
    return rows.reduce((best, s) => {
      const d = Math.abs(Math.log(s.batch_size / batch)), bd = Math.abs(Math.log(best.batch_size / batch));
      return d < bd || (d === bd && s.tokens_per_sec > best.tokens_per_sec) ? s : best;
    });
  }
  const duration = (sec) => sec < 90 ? `${Math.round(sec)} s` : sec < 5400 ? `${Math.round(sec / 60)} min` : `${(sec / 3600).toFixed(1)} h`;
  const $ = (sel) => document.querySelector(sel);
  const field = (name) => document.querySelector(`#new-form [name="${name}"]`);

  // The model as the options make it (the preset, overridden by the model fields that are set):
  // parameters and the training memory, measured by the server from the same declaration. Which options
  // shape the model is the declaration's too (GET /api/options: "model").
  const modelOptions = fetch(TG.url("/api/options")).then((r) => r.json())
    .then((options) => options.filter((o) => o.model).map((o) => o.name));
  let sizeRequest = 0;
  async function showModelSize(preset) {
    const query = new URLSearchParams({ preset: preset.name, batch_size: field("batch_size").value || 1 });
    for (const name of await modelOptions) {
      const input = field(name);
      if (!input) continue;
      if (input.type === "checkbox") {
        if (input.checked) query.set(name, "true");
      } else if (input.value !== "") query.set(name, input.value);
    }
    const mine = ++sizeRequest;
    const response = await fetch(TG.url("/api/model-size?" + query));
    if (mine !== sizeRequest) return; // a newer change is on its way
    const body = await response.json();
    $("#preset-info").textContent = response.ok
      ? `${preset.description} ${body.params.toLocaleString()} parameters; about ` +
        `${Math.round(body.memory_mib).toLocaleString()} MiB to train at this batch size (fp32, rough).`
      : `${preset.description} ${body.detail.map((d) => d.msg).join("; ")}.`;
  }

  function update() {
    const preset = byName[field("preset").value];
    if (!preset) return;
    showModelSize(preset);
    // Only values the server would accept get an estimate (the inputs carry the API's min and max).
    const sizes = ["steps", "batch_size", "grad_accum"].map(field);
    const invalid = sizes.find((input) => input.value === "" || !input.checkValidity());
    if (invalid) {
      const label = invalid.closest("label").firstChild.textContent.trim().toLowerCase();
      const why = invalid.value === "" ? "a number is needed" : invalid.validationMessage;
      $("#estimate").textContent = `No estimate until ${label} is valid (${why}).`;
      return;
    }
    const [steps, batch, accum] = sizes.map((input) => +input.value);
    const tokens = steps * batch * accum * preset.context;
    const ds = datasets.find((d) => d.name === field("dataset").value);
    let text = `About ${tokens.toLocaleString()} training tokens`;
    if (ds && ds.bytes) {
      const trainTokens = (ds.bytes / 3.63) * 0.9; // ~3.6 bytes/token for English BPE at 4,096 ids; 90% train split
      text += `, about ${(tokens / trainTokens).toFixed(2)} passes over ${ds.name}`;
    }
    const speed = measuredSpeed(preset.name, field("device").value, field("precision").value, batch);
    if (speed) {
      text += `; about ${duration(tokens / speed.tokens_per_sec)} of training on ${speed.device} ` +
        `(benchmark #${speed.run_id}: ${Math.round(speed.tokens_per_sec).toLocaleString()} tokens/s at batch ` +
        `${speed.batch_size}, ${speed.precision}; evaluations add to it)`;
    } else {
      text += "; run a benchmark of this preset for a time estimate";
    }
    $("#estimate").textContent = text + ".";
  }
  function setField(name, value) {
    const input = field(name);
    if (input.type === "checkbox") input.checked = Boolean(value);
    else input.value = value == null ? "" : value;
  }
  // What the chosen recipe is for on the chosen device, and its measured time to 3.76.
  const onDevice = () => recipes[field("device").value] || recipes.auto;
  function showRecipe() {
    $("#recipe-info").textContent = onDevice().guides[field("recipe").value];
  }
  function fillRecipe() {
    for (const [key, value] of Object.entries(onDevice().values[field("recipe").value])) setField(key, value);
  }
  // Choosing a preset fills in its suggested steps, batch size and evaluation interval; choosing a recipe,
  // the recipe's options on the chosen device (the server's values), again when the device's kind changes.
  let kind = onDevice().kind;
  document.getElementById("new-form").addEventListener("change", (ev) => {
    if (ev.target.name === "preset") {
      for (const [key, value] of Object.entries(byName[ev.target.value].training)) setField(key, value);
    } else if (ev.target.name === "recipe") {
      fillRecipe();
      showRecipe();
    } else if (ev.target.name === "device") {
      if (onDevice().kind !== kind && field("recipe").value !== "series") fillRecipe();
      kind = onDevice().kind;
      showRecipe();
    } else return;
    update();
  });
  document.getElementById("new-form").addEventListener("input", update);
  document.body.addEventListener("htmx:afterSwap", update);
  update();
}
document.addEventListener("DOMContentLoaded", setupNewRunForm);
