//! `vram serve --model org/name-GGUF` — "which quant fits?": every GGUF quant of a Hub
//! repository planned under llama.cpp at the chosen flags, and the largest that fits; with
//! `org/name:QUANT` (llama-server's `-hf` spelling) the full plan of that one quant.

use anyhow::{Context, Result};
use serde::Serialize;
use vram_core::gguf::{llama_cpp_with, max_ctx_with, CpuMoe, Gguf, LlamaCppConfig, Overrides};
use vram_core::serve_advice::{Alternative, Flag, ServeChange};

use super::serve::{apply_fit, llama_cpp_config, local_mmproj, overrides, MmprojFile};
use super::show;
use crate::cli::ServeArgs;
use crate::errors::UsageError;
use crate::render;
use crate::resolve;
use crate::source::hub::HubEnv;
use crate::source::hub_gguf::{self, QuantFile};
use vram_core::gpu::Gpu;

/// Headers read at once (each is one to a few range requests of a few MB).
const PARALLEL_HEADERS: usize = 8;

/// A Hub repository of GGUF files, as the user named it.
pub struct Spec {
    /// `org/name`.
    pub repo: String,
    /// The revision (`@rev`, else `main`).
    pub rev: String,
    /// The quant after `:`, if named.
    pub quant: Option<String>,
    env: HubEnv,
}

/// `model` as a Hub repository of GGUF files, if it is one: not a path on disk, an `org/name`
/// with `:QUANT`, or under `--engine llama.cpp|ollama`, or whose name says GGUF.
pub fn spec(a: &ServeArgs, model: &str) -> Result<Option<Spec>> {
    if std::path::Path::new(model).exists() || model.to_ascii_lowercase().ends_with(".gguf") {
        return Ok(None);
    }
    let Some((id, quant)) = hub_gguf::parse_spec(model) else { return Ok(None) };
    let (repo, rev) = match id.split_once('@') {
        Some((r, v)) => (r.to_string(), v.to_string()),
        None => (id, "main".to_string()),
    };
    let engine = a.engine.to_ascii_lowercase();
    let gguf_engine = engine == "llama.cpp" || engine == "ollama";
    if quant.is_none() && !gguf_engine && !repo.to_ascii_lowercase().contains("gguf") {
        return Ok(None);
    }
    if engine == "sglang" {
        return Err(UsageError(format!(
            "{repo} is a repository of GGUF files: vram plans GGUF under llama.cpp (--engine llama.cpp or ollama); SGLang's GGUF loading is not modelled"
        ))
        .into());
    }
    Ok(Some(Spec { repo, rev, quant, env: HubEnv::from_env() }))
}

/// A repository's listing ((path, bytes), in path order), its quants and its multimodal
/// projectors' paths.
type Listing = (Vec<(String, u64)>, Vec<QuantFile>, Vec<String>);

/// The repository's listing, its quants and its multimodal projectors.
fn quants(s: &Spec) -> Result<Listing> {
    let mut files = hub_gguf::list(&s.env, &s.repo, &s.rev)?;
    // The Hub lists paths in order; a cached snapshot is read in directory order.
    files.sort();
    let (q, skipped) = hub_gguf::group(&files);
    if q.is_empty() {
        return Err(UsageError(format!(
            "{} (revision {}) has no .gguf file: give a repository of GGUF files (for safetensors checkpoints use --engine vllm or sglang)",
            s.repo, s.rev
        ))
        .into());
    }
    Ok((files, q, skipped))
}

/// Whether llama-server's `-hf` would load the repository's projector: unless `--no-mmproj`,
/// `--mmproj FILE` or Ollama (common/arg.cpp: `download_mmproj = use_mmproj && !no_mmproj &&
/// mmproj.path.empty() && mmproj.url.empty()`).
fn wants_projector(a: &ServeArgs) -> bool {
    !a.no_mmproj && a.mmproj.is_none() && !a.engine.eq_ignore_ascii_case("ollama")
}

/// What the repository's projectors mean for the plan, when none is counted.
fn projector_note(a: &ServeArgs, skipped: &[String]) -> Option<String> {
    if skipped.is_empty() || a.mmproj.is_some() {
        return None;
    }
    let list = skipped.join(", ");
    Some(if a.no_mmproj {
        format!("--no-mmproj: the repository's multimodal projector ({list}) is not loaded")
    } else if a.engine.eq_ignore_ascii_case("ollama") {
        format!("the repository has a multimodal projector ({list}); Ollama's loading of it is not modelled and its memory is not in this estimate")
    } else {
        format!("the repository's multimodal projector ({list}) lies in a directory off the quant's path, where llama-server's -hf does not look for it: none is counted")
    })
}

/// The projector `-hf` loads beside `primary` (the quant's first file), its header read like a
/// quant's, or `None` when it loads none.
fn projector(a: &ServeArgs, s: &Spec, files: &[(String, u64)], primary: &str) -> Result<Option<MmprojFile>> {
    if !wants_projector(a) {
        return Ok(None);
    }
    hub_gguf::best_mmproj(files, primary).map(|(path, size)| read_projector(s, path, *size)).transpose()
}

/// A projector file of the repository, its header read like a quant's.
fn read_projector(s: &Spec, path: &str, size: u64) -> Result<MmprojFile> {
    let q = QuantFile { quant: "mmproj".into(), files: vec![path.to_string()], sizes: vec![size] };
    let gguf = hub_gguf::header(&s.env, &s.repo, &s.rev, &q).with_context(|| format!("{}/{path}, the projector -hf loads", s.repo))?;
    Ok(MmprojFile { name: format!("{}/{path} (the projector -hf loads; --no-mmproj leaves it out)", s.repo), gguf })
}

/// One quant of a repository, planned: its name, header and notes, and the repository's other
/// quants (for the advice).
pub struct OneQuant {
    /// `org/name:QUANT`.
    pub name: String,
    /// Its header (every shard's tensors).
    pub gguf: Gguf,
    /// What the output says about where it came from.
    pub notes: Vec<String>,
    /// Every quant of the repository, smallest first.
    pub all: Vec<QuantFile>,
    /// Bytes of the chosen quant's files.
    pub bytes: u64,
    /// The projector `-hf` loads beside it.
    pub mmproj: Option<MmprojFile>,
    /// The repository's listing.
    files: Vec<(String, u64)>,
}

/// One quant, named by its label (case-insensitive, as llama.cpp's -hf matches it) or its file
/// name.
pub fn one(a: &ServeArgs, s: &Spec, quant: &str) -> Result<OneQuant> {
    let (files, all, skipped) = quants(s)?;
    let want = quant.to_ascii_lowercase();
    let q = all
        .iter()
        .find(|q| q.quant.to_ascii_lowercase() == want || q.files.iter().any(|f| f.to_ascii_lowercase().ends_with(&want)))
        .ok_or_else(|| {
            let names: Vec<&str> = all.iter().map(|q| q.quant.as_str()).collect();
            UsageError(format!("{} has no quant `{quant}`: it has {}", s.repo, names.join(", ")))
        })?;
    let gguf = hub_gguf::header(&s.env, &s.repo, &s.rev, q)?;
    let mut notes = vec![format!(
        "{}:{} is {} ({:.2} GiB; its header read by range request or from the Hugging Face cache, the tensor data never downloaded)",
        s.repo,
        q.quant,
        q.files.join(" + "),
        vram_core::units::gib(q.bytes())
    )];
    let mmproj = projector(a, s, &files, &q.files[0])?;
    if mmproj.is_none() {
        notes.extend(projector_note(a, &skipped));
    }
    let (name, bytes) = (format!("{}:{}", s.repo, q.quant), q.bytes());
    Ok(OneQuant { name, gguf, notes, all, bytes, mmproj, files })
}

/// When the chosen quant does not fit: the largest smaller quant of the same repository that
/// fits the GPU at the same flags, as an alternative launch (`-hf org/name:QUANT`).
pub fn smaller_that_fits(a: &ServeArgs, s: &Spec, q: &OneQuant, memory: u64) -> Result<Option<Alternative>> {
    let smaller: Vec<QuantFile> = q.all.iter().filter(|x| x.bytes() < q.bytes).cloned().collect();
    let ov = overrides(a)?;
    let headers = read_headers(s, &smaller);
    let local = local_mmproj(a)?;
    let gpu = resolve::gpu(&a.gpu)?;
    for (x, h) in smaller.iter().zip(headers).rev() {
        let Ok(mut g) = h else { continue };
        // A misspelt key is noted in the plan of one quant, not in the table.
        super::serve::override_kv(a, &mut g)?;
        let Ok(hp) = g.hparams(&x.quant) else { continue };
        let mm = match &local {
            Some(m) => Some(m.clone()),
            None => projector(a, s, &q.files, &x.files[0])?,
        };
        let ov = Overrides { lora: super::serve::lora_adapters(a, &g)?, ..ov.clone() };
        let (c, ollama) = llama_cpp_config(a, &hp, memory, mm.as_ref())?;
        let c = if ollama.is_some() { c } else { apply_fit(a, &g, &hp, c, ov.clone(), &gpu, None, false)?.config };
        let p = llama_cpp_with(&g, &hp, &c, &ov)?;
        if p.gpu_total_bytes > memory {
            continue;
        }
        let longest = max_ctx_with(&g, &hp, &c, &ov, memory, c.ctx)?.unwrap_or(0);
        return Ok(Some(Alternative {
            change: ServeChange::QuantizedWeights,
            flags: vec![Flag::new("-hf", format!("{}:{}", s.repo, x.quant))],
            description: format!(
                "the repository's {} quant ({:.2} GiB of files), the largest that fits with these flags",
                x.quant,
                vram_core::units::gib(x.bytes())
            ),
            fits: true,
            kv_tokens: p.ctx,
            max_concurrency: c.parallel as f64,
            max_model_len: p.ctx_per_sequence,
            longest_max_model_len: longest,
            gpus: 1,
            suggestion: false,
            caveats: vec!["fewer bits per weight: some loss of quality".into()],
        }));
    }
    Ok(None)
}

/// One quant's row.
#[derive(Serialize)]
pub struct QuantRow {
    /// The quant as the file name spells it.
    pub quant: String,
    /// Its files (shards in order).
    pub files: Vec<String>,
    /// Bytes of its files.
    pub file_bytes: u64,
    /// The plan at the requested flags, or why it could not be made.
    #[serde(flatten)]
    pub outcome: RowOutcome,
}

/// A planned quant, or the error its header gave.
#[derive(Serialize)]
#[serde(untagged)]
pub enum RowOutcome {
    /// Planned.
    Planned {
        /// The context it is planned at: the one given, else the one llama-server's --fit picks.
        ctx: u64,
        /// Everything on the GPU at the requested flags.
        gpu_total_bytes: u64,
        /// Weights left in RAM at the requested flags.
        cpu_weights_bytes: u64,
        /// Whether it fits the GPU.
        fits: bool,
        /// The longest `--ctx-size` that fits at the requested `--n-gpu-layers`.
        max_ctx_size: Option<u64>,
        /// When it does not fit: the most `--n-gpu-layers` that fit at the requested context.
        max_n_gpu_layers: Option<u64>,
        /// When a MoE file does not fit: the smallest `--n-cpu-moe` with which it does (all
        /// layers on the GPU, those layers' experts in RAM).
        min_n_cpu_moe: Option<u64>,
    },
    /// Not planned.
    Error {
        /// Why.
        error: String,
    },
}

/// The table `vram serve --model org/name-GGUF` prints.
pub struct QuantTable {
    /// `org/name`.
    pub repo: String,
    /// The revision.
    pub rev: String,
    /// The GPU.
    pub gpu: Gpu,
    /// The settings (the first planned quant's; only Ollama's defaults vary by file).
    pub config: Option<LlamaCppConfig>,
    /// One row per quant, smallest first.
    pub rows: Vec<QuantRow>,
    /// The largest quant that fits, if any.
    pub best: Option<String>,
    /// How a pasted command was read, and what the table leaves out.
    pub notes: Vec<String>,
    /// Each row's context is the one llama-server's --fit picks for its file (no -c given).
    pub ctx_fitted: bool,
}

/// Every quant of the repository planned at the flags; printed.
pub fn table(a: &ServeArgs, s: &Spec, pasted: &[String], has_log: bool) -> Result<()> {
    if has_log {
        return Err(
            UsageError(format!("--log compares one launch with its log: name the quant the log loaded ({}:Q4_K_M, …)", s.repo)).into()
        );
    }
    if super::serve::multi_gpu(a)?.is_some() {
        return Err(
            UsageError(format!("the quant table plans one GPU: name a quant ({}:Q4_K_M, …) to plan it over several GPUs", s.repo)).into()
        );
    }
    let gpu = resolve::gpu(&a.gpu)?;
    let ov = overrides(a)?;
    let (files, all, skipped) = quants(s)?;
    let headers = read_headers(s, &all);
    let local = local_mmproj(a)?;
    // Each projector -hf picks, its header read once: (path, the quants it serves, header or error).
    type Read = std::result::Result<MmprojFile, String>;
    let mut counted: Vec<(String, Vec<String>, Read)> = Vec::new();
    let mut rows = Vec::new();
    let mut config = None;
    for (q, h) in all.iter().zip(headers) {
        let mm = match &local {
            Some(m) => Ok(Some(m.clone())),
            None if !wants_projector(a) => Ok(None),
            None => match hub_gguf::best_mmproj(&files, &q.files[0]) {
                None => Ok(None),
                Some((path, size)) => {
                    let i = match counted.iter().position(|(p, _, _)| p == path) {
                        Some(i) => i,
                        None => {
                            counted.push((path.clone(), Vec::new(), read_projector(s, path, *size).map_err(|e| format!("{e:#}"))));
                            counted.len() - 1
                        }
                    };
                    counted[i].1.push(q.quant.clone());
                    counted[i].2.clone().map(Some)
                }
            },
        };
        let outcome = match h.and_then(|g| plan_row(a, &q.quant, &g, &ov, &gpu, mm.map_err(anyhow::Error::msg)?.as_ref())) {
            Ok((c, o)) => {
                config.get_or_insert(c);
                o
            }
            Err(e) => RowOutcome::Error { error: format!("{e:#}") },
        };
        rows.push(QuantRow { quant: q.quant.clone(), files: q.files.clone(), file_bytes: q.bytes(), outcome });
    }
    if rows.iter().all(|r| matches!(r.outcome, RowOutcome::Error { .. })) {
        let first = rows.iter().find_map(|r| if let RowOutcome::Error { error } = &r.outcome { Some(error.clone()) } else { None });
        return Err(UsageError(format!("{}: no quant could be planned: {}", s.repo, first.unwrap_or_default())).into());
    }
    // The largest file that fits: the least quantized that fits.
    let best = rows
        .iter()
        .filter(|r| matches!(r.outcome, RowOutcome::Planned { fits: true, .. }))
        .max_by_key(|r| r.file_bytes)
        .map(|r| r.quant.clone());
    let mut notes = pasted.to_vec();
    if counted.is_empty() {
        notes.extend(projector_note(a, &skipped));
    } else {
        let each: Vec<String> = counted.iter().map(|(p, qs, _)| format!("{p} for {}", qs.join(", "))).collect();
        notes.push(format!(
            "every row counts the multimodal projector llama-server's -hf loads beside the quant (llama.cpp common/download.cpp find_best_mmproj): {}; --no-mmproj leaves it out",
            each.join("; ")
        ));
    }
    if !a.engine.eq_ignore_ascii_case("llama.cpp") && !a.engine.eq_ignore_ascii_case("ollama") {
        notes.push("a repository of GGUF files is planned under llama.cpp (vLLM's GGUF loading is not modelled)".into());
    }
    let ctx_fitted =
        a.ctx_size.is_none() && a.max_model_len.is_none() && !a.engine.eq_ignore_ascii_case("ollama") && a.fit.as_deref() != Some("off");
    if ctx_fitted {
        notes.push(
            "no -c: each quant is planned at the context llama-server's --fit picks for it (the training context, cut to leave --fit-target of 1024 MiB free, not below --fit-ctx 4096), every layer on the GPU; give -c to compare the quants at one context".into(),
        );
    }
    let t = QuantTable { repo: s.repo.clone(), rev: s.rev.clone(), gpu, config, rows, best, notes, ctx_fitted };
    show(a.json, || render::serve_quants::json(&t), || render::serve_quants::text(&t))
}

/// Every quant's header, at most [`PARALLEL_HEADERS`] at a time, in order.
fn read_headers(s: &Spec, all: &[QuantFile]) -> Vec<Result<Gguf>> {
    let mut out = Vec::with_capacity(all.len());
    for chunk in all.chunks(PARALLEL_HEADERS) {
        std::thread::scope(|scope| {
            let handles: Vec<_> = chunk.iter().map(|q| scope.spawn(move || hub_gguf::header(&s.env, &s.repo, &s.rev, q))).collect();
            for h in handles {
                out.push(h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("reading the header panicked"))));
            }
        });
    }
    out
}

/// One quant planned at the flags: the settings used and the row.
fn plan_row(
    a: &ServeArgs,
    name: &str,
    g: &Gguf,
    ov: &vram_core::gguf::Overrides,
    gpu: &Gpu,
    mm: Option<&MmprojFile>,
) -> Result<(LlamaCppConfig, RowOutcome)> {
    let memory = gpu.memory;
    let mut overridden = g.clone();
    // A misspelt key is noted in the plan of one quant, not in the table.
    super::serve::override_kv(a, &mut overridden)?;
    let g = &overridden;
    let hp = g.hparams(name)?;
    // The --lora adapters, checked against this quant's header (its tensors' names and shapes).
    let ov = &Overrides { lora: super::serve::lora_adapters(a, g)?, ..ov.clone() };
    let (c, ollama) = llama_cpp_config(a, &hp, memory, mm)?;
    // The context llama-server's --fit picks for this file (the table keeps every layer on the
    // GPU: `max_n_gpu_layers` says what fits otherwise).
    let c = if ollama.is_some() { c } else { apply_fit(a, g, &hp, c, ov.clone(), gpu, None, false)?.config };
    let p = llama_cpp_with(g, &hp, &c, ov)?;
    let limit = if hp.context_length > 0 { hp.context_length } else { 1 << 20 };
    let fits = p.gpu_total_bytes <= memory;
    let max_ctx_size = max_ctx_with(g, &hp, &c, ov, memory, limit)?;
    // Fitting shrinks as layers are added: bisect the most that fit at this context.
    let max_n_gpu_layers = if fits {
        None
    } else {
        let fit = |n: u64| -> vram_core::Result<bool> {
            Ok(llama_cpp_with(g, &hp, &LlamaCppConfig { n_gpu_layers: n, ..c }, ov)?.gpu_total_bytes <= memory)
        };
        if fit(0)? {
            Some(vram_core::llama_fit::most_layers(c.n_gpu_layers.min(hp.layers + 1), fit)?)
        } else {
            None
        }
    };
    // A MoE file that does not fit, with no tensor overrides given: the fewest layers whose
    // experts `--n-cpu-moe` must keep in RAM for everything else to fit on the GPU.
    let min_n_cpu_moe = if fits || !ov.tensor.is_empty() || ov.cpu_moe != CpuMoe::None {
        None
    } else {
        let moe = |n: u64| ov.moe_only(CpuMoe::FirstLayers(n));
        let fit = |n: u64| Ok(llama_cpp_with(g, &hp, &c, &moe(n))?.gpu_total_bytes <= memory);
        let has_experts = llama_cpp_with(g, &hp, &c, &ov.moe_only(CpuMoe::All))?.overridden_tensors > 0;
        if has_experts {
            vram_core::serve_advice::smallest(1, hp.layers, &fit)?
        } else {
            None
        }
    };
    let row = RowOutcome::Planned {
        ctx: p.ctx,
        gpu_total_bytes: p.gpu_total_bytes,
        cpu_weights_bytes: p.cpu_weights_bytes,
        fits,
        max_ctx_size,
        max_n_gpu_layers,
        min_n_cpu_moe,
    };
    Ok((c, row))
}
