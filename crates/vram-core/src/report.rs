//! The JSON objects every front end prints (the CLI's `--json`, the web page, the Python
//! package through the CLI): one definition, built from the core's own result types.

use serde_json::{json, Value};

use crate::gpu::Gpu;
use crate::{Estimate, Job, Model};

/// The model as JSON.
pub fn model_json(m: &Model) -> Value {
    json!({
        "name": m.name,
        "model_type": m.model_type,
        // An approximate model's stand-in lacks some of the checkpoint's parameters (arch_infer).
        "parameters": m.parameters() + crate::memory::unmodelled_parameters(m),
        "checkpoint_parameters": m.checkpoint_parameters,
        "hidden_size": m.hidden,
        "num_layers": m.config_layers(),
        "num_attention_heads": m.heads,
        "num_key_value_heads": m.kv_heads,
        "head_dim": m.head_dim,
        "vocab_size": m.vocab,
        "tied_embeddings": m.tied_embeddings,
        "moe": m.moe.as_ref().map(|x| json!({"experts": x.experts, "top_k": x.top_k})),
        "stored_dtype": m.stored_dtype.map(|d| d.torch_name()),
        "approximation": m.approximation,
        "quantization": m.quantization,
        "checkpoint_quantization": m.checkpoint_quantization,
        "rope_scaling": m.rope_scaling,
        "warnings": m.warnings,
        "kind": m.kind(),
        // Encoders: the head and, for vision transformers, the image and its tokens.
        "encoder": m.encoder.map(|e| json!({
            "task": e.head.task(),
            "labels": e.head.labels(),
            "image_size": e.vision.map(|v| v.image_size),
            "patch_size": e.vision.map(|v| v.patch),
        })),
        // Vision-language models: the tower and what each image puts in the sequence.
        "vision_tower": m.multimodal.as_ref().map(|mm| json!({
            "model_type": mm.tower.model_type,
            "parameters": mm.tower.parameters(),
            "projector_parameters": mm.projector_parameters(m.hidden),
            "image_tokens": mm.image_tokens,
            "images_per_sample": mm.images,
            "frozen": mm.tower_frozen,
        })),
        // Dual encoders (CLIP, SigLIP): the vision tower beside this text tower.
        "dual_encoder": m.dual.as_ref().map(|d| {
            let v = d.vision.encoder.and_then(|e| e.vision);
            json!({
                "family": d.family,
                "vision_parameters": d.vision.parameters(),
                "joint_parameters": d.joint_parameters(m.hidden),
                "image_size": v.map(|v| v.image_size),
                "patch_size": v.map(|v| v.patch),
                "projection": d.projection,
                "frozen": d.tower_frozen,
            })
        }),
        // Encoder-decoder models: the encoder stack and its positions.
        "seq2seq_encoder": m.seq2seq.as_ref().map(|s| json!({
            "parameters": s.encoder_parameters(),
            "layers": s.encoder.layers,
            "source_positions": s.source_tokens,
        })),
    })
}

/// The job as JSON.
pub fn job_json(j: &Job) -> Value {
    let mut v = serde_json::to_value(j).unwrap_or(Value::Null);
    // The device terms as numbers, as before they became per-mode measured defaults (the JSON
    // fields are only ever added): what this job's estimate uses, given or measured.
    if let Some(o) = v.get_mut("overheads").and_then(Value::as_object_mut) {
        o.insert("cuda_context".into(), json!(j.overheads.context_for(j.mode)));
        o.insert("cublas_workspace".into(), json!(j.overheads.cublas_for(j.mode)));
    }
    v
}

/// The GPU as JSON.
pub fn gpu_json(g: &Gpu) -> Value {
    json!({"name": g.name, "display": g.display, "memory_bytes": g.memory, "memory_source": g.memory_source, "tflops_16bit": g.tflops_16bit})
}

/// An estimate's components, totals and phases as JSON.
pub fn estimate_body(e: &Estimate) -> Value {
    json!({
        "components": e.components,
        "peak_allocated_bytes": e.peak_allocated,
        "total_bytes": e.total,
        "peak_phase": e.peak_phase,
        "phases": e.phases.iter().map(|p| json!({"phase": p.phase, "allocated_bytes": p.allocated})).collect::<Vec<_>>(),
        "attention_kernel": e.attention_kernel,
        "notes": e.notes,
    })
}

/// A serving launch's ranked alternatives as JSON (`advice`: the CLI's `vram serve --json` and the
/// web page's serve answer): each alternative with its rank and its flags as one string.
pub fn serve_advice_json(a: &crate::serve_advice::ServeAdvice) -> Value {
    let alts: Vec<Value> = a
        .alternatives
        .iter()
        .enumerate()
        .map(|(i, alt)| {
            let mut v = serde_json::to_value(alt).unwrap_or(Value::Null);
            v["rank"] = json!(i + 1);
            v["flag"] = json!(alt.flags.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(" "));
            v
        })
        .collect();
    json!({ "needed": a.needed, "max_concurrency": a.max_concurrency, "alternatives": alts })
}
