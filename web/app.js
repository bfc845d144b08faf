// vram page: a thin shell over vram-core compiled to WebAssembly (crates/vram-wasm).
// No memory formula lives here: every number is a field of the wasm's JSON answer, which is the
// JSON `vram estimate|fit|serve --json` prints. This file only moves URL ⇄ form ⇄ requests and
// prints bytes in GiB (2^30) and GB (10^9).
'use strict';

const T0 = performance.now();
const GIB = 2 ** 30;
const GB = 1e9;

// Which URL keys each operation reads besides the model and the job. Everything else in the URL
// goes to `estimate`, which names any key it does not read (a typo is an error, not ignored).
const FIT_ONLY = ['target_utilization'];
const SERVE_ONLY = ['max_model_len', 'gpu_memory_utilization', 'tensor_parallel_size', 'speculative_config'];
const MODEL_KEYS = ['model', 'config', 'config_name'];
const TRAIN_ONLY = ['optimizer', 'checkpointing', 'grad_accum', 'fused_cross_entropy', 'peft', 'lora_r', 'lora_target_modules', 'load_in_4bit'];
const INFER_ONLY = ['kv_dtype', 'prompt_len', ...SERVE_ONLY];

const $ = (id) => document.getElementById(id);

// ---- the wasm module: alloc/free + one JSON call --------------------------------------------

let wasmModule = null;
let wasm = null;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

async function loadWasm() {
  const response = await fetch('vram.wasm');
  if (!response.ok) throw new Error(`cannot load vram.wasm (HTTP ${response.status}): build it with scripts/build-web.sh`);
  wasmModule = await WebAssembly.compile(await response.arrayBuffer());
  await instantiate();
}

async function instantiate() {
  wasm = (await WebAssembly.instantiate(wasmModule, {})).exports;
}

// Read a length-prefixed UTF-8 buffer the module handed out, and free it.
function takeBuffer(ptr) {
  const len = new DataView(wasm.memory.buffer).getUint32(ptr, true);
  const text = decoder.decode(new Uint8Array(wasm.memory.buffer, ptr + 4, len));
  wasm.vram_free(ptr, 4 + len);
  return text;
}

// One request → the parsed answer; `{error}` answers and traps become thrown Errors.
async function call(request) {
  const bytes = encoder.encode(JSON.stringify(request));
  let answer;
  try {
    const ptr = wasm.vram_alloc(bytes.length);
    new Uint8Array(wasm.memory.buffer, ptr, bytes.length).set(bytes);
    const out = wasm.vram_call(ptr, bytes.length);
    wasm.vram_free(ptr, bytes.length);
    answer = JSON.parse(takeBuffer(out));
  } catch (e) {
    if (e instanceof WebAssembly.RuntimeError) {
      // A panic aborts the module: fetch its message, then start a fresh instance.
      let why = '';
      try { why = takeBuffer(wasm.vram_last_panic()); } catch (_) { /* the message is lost */ }
      await instantiate();
      throw new Error(`internal error in vram (a bug; please report it with this link): ${why || e.message}`);
    }
    throw e;
  }
  if (answer && typeof answer.error === 'string') throw new Error(answer.error);
  return answer;
}

// ---- URL ⇄ form ------------------------------------------------------------------------------

let configText = null; // a dropped config.json (kept in the URL fragment so the link reproduces it)

function formKeys() {
  return Array.from($('job').elements).filter((e) => e.name).map((e) => e.name);
}

function readUrl() {
  const params = new URLSearchParams(location.search);
  const state = {};
  for (const [k, v] of params) if (v.trim() !== '') state[k] = v;
  return state;
}

// A config.json carried by the link, in its fragment (`#config=` base64url of the text).
function readUrlConfig() {
  const hash = new URLSearchParams(location.hash.slice(1));
  if (!hash.has('config')) return null;
  try {
    return fromBase64Url(hash.get('config'));
  } catch (e) {
    // Sent as is: the wasm says it is not a config.json.
    return hash.get('config');
  }
}

function fillForm(state) {
  for (const name of formKeys()) {
    const el = $(name);
    if (!el) continue;
    const v = state[name] ?? '';
    if (el.tagName === 'SELECT' && v !== '' && !Array.from(el.options).some((o) => o.value === v)) {
      el.add(new Option(v, v)); // a value the menu does not list is kept, and the wasm judges it
    }
    el.value = v;
  }
  showModeFields(state.mode);
}

// The state is what the form says plus URL keys the form has no field for (they reach the wasm,
// which names them if nothing reads them).
function stateFromForm() {
  const state = {};
  const named = new Set(formKeys());
  for (const [k, v] of Object.entries(readUrl())) if (!named.has(k)) state[k] = v;
  for (const name of named) {
    const v = $(name).value.trim();
    if (v !== '') state[name] = v;
  }
  if (configText !== null) delete state.model;
  else delete state.config_name;
  return state;
}

function writeUrl(state) {
  const q = new URLSearchParams(state).toString();
  const hash = configText !== null ? '#config=' + toBase64Url(configText) : '';
  const url = `${location.pathname}${q ? '?' + q : ''}${hash}`;
  history.replaceState(null, '', url);
  $('permalink').href = url;
}

function toBase64Url(text) {
  let bin = '';
  for (const b of encoder.encode(text)) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function fromBase64Url(s) {
  const bin = atob(s.replace(/-/g, '+').replace(/_/g, '/'));
  return decoder.decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
}

function showModeFields(mode) {
  const infer = mode === 'infer';
  for (const el of document.querySelectorAll('.train-only')) el.hidden = infer;
  for (const el of document.querySelectorAll('.infer-only')) el.hidden = !infer;
}

// ---- requests ----------------------------------------------------------------------------------

function requests(state) {
  const model = configText !== null ? { config: configText, config_name: state.config_name || 'config.json' } : { model: state.model };
  const pick = (keys) => Object.fromEntries(keys.filter((k) => k in state).map((k) => [k, state[k]]));
  const notForEstimate = new Set([...FIT_ONLY, ...SERVE_ONLY, ...MODEL_KEYS]);
  const estimate = { op: 'estimate', ...model };
  for (const [k, v] of Object.entries(state)) if (!notForEstimate.has(k)) estimate[k] = v;
  const out = { estimate };
  if (state.gpu) {
    const fit = { ...estimate, op: 'fit', ...pick(FIT_ONLY) };
    delete fit.batch_size; // fit searches it
    out.fit = fit;
    if (state.mode === 'infer' || SERVE_ONLY.some((k) => k in state)) {
      out.serve = { op: 'serve', ...model, gpu: state.gpu, ...pick(SERVE_ONLY) };
    }
  }
  return out;
}

// ---- rendering -------------------------------------------------------------------------------

const gib = (b) => (b > 0 && b / GIB < 0.005 ? '<0.01' : (b / GIB).toFixed(2));
const size = (b) => `${gib(b)} GiB (${(b / GB).toFixed(2)} GB)`;
const pct = (x) => `${(x * 100).toFixed(1)}%`;
const thousands = (n) => Number(n).toLocaleString('en-US');

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'style') e.setAttribute('style', v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function setBytes(id, bytes) {
  const span = $(id);
  span.dataset.bytes = String(bytes);
  span.textContent = size(bytes);
  span.title = `${thousands(bytes)} bytes`;
}

function renderEstimate(e) {
  const m = e.model;
  $('estimate-title').textContent = `${m.approximation ? 'APPROXIMATE: ' : ''}${m.name} — ${e.job.mode === 'infer' ? 'inference' : 'training'}`;
  $('model-line').textContent =
    `${thousands(m.parameters)} parameters (${m.model_type}${m.stored_dtype ? ', stored ' + m.stored_dtype : ''}) · ` +
    `batch ${e.job.batch} × ${thousands(e.job.seq)} tokens · ${e.job.precision} · attention kernel ${e.attention_kernel} · peak at ${e.peak_phase}`;
  setBytes('total-bytes', e.total_bytes);
  setBytes('peak-bytes', e.peak_allocated_bytes);
  const g = e.gpu;
  $('gpu-line').textContent = g
    ? `on ${g.display} (${size(g.memory_bytes)}, ${g.memory_source.replace('_', '-')}): ${pct(g.utilization)} — ${g.verdict_text}`
    : 'No GPU chosen: pick one to see the share it takes and the largest batch that fits.';
  $('gpu-line').className = g && !g.fits ? 'oom' : '';
  renderChart(e);
  const body = $('components').tBodies[0];
  body.replaceChildren();
  e.components.forEach((c, i) => {
    body.append(el('tr', { title: c.detail || '' },
      el('td', {}, el('span', { class: 'swatch', style: `background:${color(i)}` }), ` ${c.name}`),
      el('td', { class: 'num' }, gib(c.bytes)),
      el('td', { class: 'num' }, pct(c.bytes / Math.max(e.total_bytes, 1)))));
  });
  body.append(el('tr', { class: 'total' }, el('td', {}, 'total (what nvidia-smi shows)'), el('td', { class: 'num' }, gib(e.total_bytes)), el('td', { class: 'num' }, '100%')));
  $('phases').textContent = 'allocated by phase (GiB): ' + e.phases.map((p) => `${p.phase} ${gib(p.allocated_bytes)}`).join(' · ');
  const notes = $('notes');
  notes.replaceChildren();
  for (const w of m.warnings) notes.append(el('li', { class: 'warning' }, `warning: ${w}`));
  for (const n of [...e.notes, ...e.advice]) notes.append(el('li', {}, n));
}

const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];
const color = (i) => PALETTE[i % PALETTE.length];

// One stacked bar of the components, on a scale holding both the total and the GPU.
function renderChart(e) {
  const chart = $('chart');
  chart.replaceChildren();
  const scale = Math.max(e.total_bytes, e.gpu ? e.gpu.memory_bytes : 0, 1);
  const bar = el('div', { class: 'bar' });
  e.components.forEach((c, i) => {
    if (c.bytes === 0) return;
    bar.append(el('div', { class: 'seg', style: `width:${(c.bytes / scale) * 100}%;background:${color(i)}`, title: `${c.name}: ${size(c.bytes)}` }));
  });
  chart.append(bar);
  if (e.gpu) {
    chart.append(el('div', { class: 'capacity', style: `left:${(e.gpu.memory_bytes / scale) * 100}%`, title: `${e.gpu.display}: ${size(e.gpu.memory_bytes)}` }));
    chart.append(el('div', { class: 'axis' }, `0`, el('span', {}, `${e.gpu.name} ${gib(e.gpu.memory_bytes)} GiB`)));
  }
}

function renderFit(f) {
  $('fit').hidden = false;
  const s = $('fit-summary');
  if (f.max_batch_size !== null) {
    s.replaceChildren(`On ${f.gpu.display} at ${pct(f.target_utilization)} (${size(f.budget_bytes)}): largest micro-batch `,
      el('strong', { id: 'max-batch' }, String(f.max_batch_size)),
      ` (${pct(f.utilization)} of the GPU, ${size(f.estimate.total_bytes)}). ${f.verdict_text}.`);
  } else {
    s.replaceChildren(el('strong', { id: 'max-batch', class: 'oom' }, 'batch 1 does not fit'),
      ` the target of ${pct(f.target_utilization)} (${size(f.budget_bytes)}) on ${f.gpu.display}: ${f.verdict_text}.`);
  }
  const body = $('fit-table').tBodies[0];
  body.replaceChildren();
  for (const r of f.rows) {
    const mark = r.batch === f.max_batch_size ? '← largest within target' : r.utilization > 1 ? 'OOM' : '';
    body.append(el('tr', { class: mark.startsWith('←') ? 'chosen' : mark ? 'oom' : '' },
      el('td', { class: 'num' }, String(r.batch)), el('td', { class: 'num' }, gib(r.peak_allocated)),
      el('td', { class: 'num' }, gib(r.total)), el('td', { class: 'num' }, pct(r.utilization)), el('td', {}, mark)));
  }
  const alts = f.alternatives || [];
  $('alternatives-title').hidden = alts.length === 0;
  $('alternatives-title').textContent = f.max_batch_size === null
    ? 'What would let batch 1 fit (each re-estimated)'
    : `What would raise the batch (each re-estimated at batch ${f.alternatives_reference_batch})`;
  const list = $('alternatives');
  list.replaceChildren();
  for (const a of alts.slice(0, f.max_batch_size === null ? 6 : 3)) {
    list.append(el('li', {}, `batch ${a.max_batch}: ${a.change} — ${gib(a.total)} GiB, saves ${gib(a.saving)} GiB` +
      `${a.gpus > 1 ? ` [${a.gpus} GPUs]` : ''}${a.hf_flags ? ` · HF/TRL: ${a.hf_flags}` : ''}${a.cost ? ` · cost: ${a.cost}` : ''}`));
  }
}

function renderServe(s) {
  $('serve').hidden = false;
  const r = s.gpus[0];
  const rows = [
    ['weights', r.weights_bytes],
    ['profile-run activation peak', r.activation_peak_bytes],
    ['non-torch increase', r.non_torch_bytes],
    ...(r.runner_buffers_bytes > 0 ? [['runner buffers kept from start-up', r.runner_buffers_bytes]] : []),
    ['= non-KV memory', r.non_kv_bytes],
    [`requested (--gpu-memory-utilization ${s.config.gpu_memory_utilization})`, r.requested_bytes],
    ['KV-cache pool', r.kv_cache_bytes],
    ['the process shows at least (nvidia-smi)', r.process_bytes_at_least],
  ];
  const body = $('serve-table').tBodies[0];
  body.replaceChildren(...rows.map(([n, b]) => el('tr', {}, el('td', {}, n), el('td', { class: 'num' }, size(b)))));
  const p = $('serve-summary');
  p.className = r.fits ? '' : 'oom';
  p.replaceChildren(`${s.gpus.length > 1 ? `per GPU (each of ${s.gpus.length} TP ranks) · ` : ''}` +
    `--max-model-len ${thousands(r.max_model_len)} · ${thousands(r.num_kv_blocks)} KV blocks = `,
  el('span', { id: 'kv-tokens', 'data-tokens': String(r.kv_tokens) }, thousands(r.kv_tokens)),
  ` tokens · maximum concurrency ${Number(r.max_concurrency).toFixed(2)}× · ` +
    (r.fits
      ? 'fits.'
      : r.shortfall_bytes > 0
        ? `does NOT fit: non-KV memory exceeds the requested ${size(r.requested_bytes)} by ${size(r.shortfall_bytes)} — raise --gpu-memory-utilization, add GPUs (--tensor-parallel-size) or quantize.`
        : `does NOT fit: one request of ${thousands(r.max_model_len)} tokens needs more KV cache than the pool holds; the longest --max-model-len that fits is ${thousands(r.max_model_len_that_fits)}.`));
}

function showError(msg) {
  const e = $('error');
  e.textContent = msg ? `error: ${msg}` : '';
  e.hidden = !msg;
}

// ---- the loop: URL → form → wasm → page ------------------------------------------------------

let firstAnswer = null;

async function compute() {
  const state = stateFromForm();
  writeUrl(state);
  showModeFields(state.mode);
  showError('');
  const reqs = requests(state);
  $('cli-command').textContent = cliCommand(state);
  try {
    if (!reqs.estimate.model && !reqs.estimate.config) {
      $('results').hidden = true;
      $('status').textContent = 'Pick a preset or drop a config.json.';
      return;
    }
    const t = performance.now();
    $('results').hidden = true; // no stale answer beside an error
    const estimate = await call(reqs.estimate);
    renderEstimate(estimate);
    $('fit').hidden = true;
    $('serve').hidden = true;
    $('results').hidden = false;
    $('status').textContent = '';
    if (firstAnswer === null) {
      firstAnswer = performance.now();
      const timing = $('timing');
      // performance.now() counts from the navigation start: the page's time to first answer.
      timing.dataset.firstAnswerMs = firstAnswer.toFixed(1);
      timing.dataset.afterScriptMs = (firstAnswer - T0).toFixed(1);
      timing.dataset.estimateMs = (firstAnswer - t).toFixed(1);
      timing.textContent = `First answer ${timing.dataset.firstAnswerMs} ms after navigation (wasm ready at ${timing.dataset.wasmLoadMs} ms, estimate ${timing.dataset.estimateMs} ms).`;
      console.log(`vram-timing first_answer_ms=${timing.dataset.firstAnswerMs} script_start_to_answer_ms=${timing.dataset.afterScriptMs} wasm_ready_at_ms=${timing.dataset.wasmLoadMs} estimate_ms=${timing.dataset.estimateMs}`);
    }
    if (reqs.fit) renderFit(await call(reqs.fit));
    if (reqs.serve) renderServe(await call(reqs.serve));
  } catch (e) {
    showError(e.message);
    $('status').textContent = '';
  }
}

// The equivalent command line, for the footer.
function cliCommand(state) {
  const args = [configText !== null ? `--model ${state.config_name || 'config.json'}` : `--model ${state.model || 'M'}`];
  for (const [k, v] of Object.entries(state)) {
    if (MODEL_KEYS.includes(k) || FIT_ONLY.includes(k) || SERVE_ONLY.includes(k)) continue;
    args.push(v === 'true' ? `--${k.replace(/_/g, '-')}` : `--${k.replace(/_/g, '-')} ${v}`);
  }
  return `vram estimate ${args.join(' ')}`;
}

async function loadConfigFile(file) {
  if (!file) return;
  configText = await file.text();
  $('model').value = '';
  $('config-info').hidden = false;
  $('config-info').textContent = `using ${file.name} (${thousands(configText.length)} bytes, kept in the link)`;
  const url = new URLSearchParams(location.search);
  url.set('config_name', file.name);
  history.replaceState(null, '', `${location.pathname}?${url}`);
  await compute();
}

async function main() {
  const state = readUrl();
  configText = readUrlConfig();
  try {
    await loadWasm();
  } catch (e) {
    $('status').textContent = '';
    showError(e.message);
    document.body.dataset.ready = 'error';
    return;
  }
  $('timing').dataset.wasmLoadMs = performance.now().toFixed(1);
  fillForm(state);
  if (configText !== null) {
    $('config-info').hidden = false;
    $('config-info').textContent = `using ${state.config_name || 'config.json'} from the link (${thousands(configText.length)} bytes)`;
  }
  // The answer first, the menus after: a link's answer does not wait for the catalogues.
  await compute();
  try {
    const [presets, gpus] = [await call({ op: 'presets' }), await call({ op: 'gpus' })];
    const sel = $('model');
    const chosen = sel.value;
    sel.replaceChildren(new Option('(choose a preset)', ''));
    for (const p of presets) sel.add(new Option(`${p.name} — ${thousands(p.parameters)} parameters`, p.name));
    if (chosen && !presets.some((p) => p.name === chosen)) sel.add(new Option(chosen, chosen));
    sel.value = chosen;
    $('gpu-list').replaceChildren(...gpus.map((g) => new Option(`${g.display}, ${gib(g.memory_bytes)} GiB`, g.name)));
  } catch (e) {
    showError(e.message);
  }
  $('job').addEventListener('change', (ev) => {
    if (ev.target.id === 'config-file') return;
    if (ev.target.id === 'model' && ev.target.value) {
      configText = null;
      $('config-info').hidden = true;
    }
    if (ev.target.id === 'mode') {
      // Fields the other mode reads would be refused: clear them.
      for (const k of ev.target.value === 'infer' ? TRAIN_ONLY : INFER_ONLY) if ($(k)) $(k).value = '';
    }
    compute();
  });
  $('config-file').addEventListener('change', (ev) => loadConfigFile(ev.target.files[0]));
  const drop = $('drop');
  drop.addEventListener('dragover', (ev) => { ev.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (ev) => {
    ev.preventDefault();
    drop.classList.remove('over');
    loadConfigFile(ev.dataTransfer.files[0]);
  });
  $('reset').addEventListener('click', () => {
    configText = null;
    history.replaceState(null, '', location.pathname);
    fillForm({});
    $('config-info').hidden = true;
    compute();
  });
  document.body.dataset.ready = 'true';
}

main();
