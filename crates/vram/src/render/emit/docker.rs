//! `--emit docker`: a Docker Compose service (compose spec: `deploy.resources.reservations.devices`
//! for GPUs, `ipc: host` for the shared memory PyTorch and NCCL use between workers, as vLLM's
//! deployment docs run it).

use std::fmt::Write;

use super::launch::{argv, image_header, service_name, yaml_str, Launch, LaunchEngine};

/// The directory of a local model file (mounted at /models).
fn model_dir(l: &Launch) -> String {
    match std::path::Path::new(&l.model).parent().map(|p| p.display().to_string()) {
        Some(d) if !d.is_empty() => d,
        _ => ".".into(),
    }
}

/// The launch as the container sees it: a local file under /models.
fn container_model(l: &Launch) -> Launch {
    let mut c = l.clone();
    if !l.is_hub_model() {
        let file = std::path::Path::new(&l.model).file_name().map_or_else(|| l.model.clone(), |f| f.to_string_lossy().to_string());
        c.model = format!("/models/{file}");
    }
    c
}

/// The compose file.
pub fn compose(l: &Launch) -> String {
    let (image, command) = match l.engine {
        // The vllm-openai image's entrypoint is the OpenAI server; it takes `--model` (vLLM docs, deployment/docker).
        LaunchEngine::Vllm => (format!("vllm/vllm-openai:{}", l.image_tag), argv(l, true)),
        LaunchEngine::Sglang => {
            let mut c: Vec<String> = ["python3", "-m", "sglang.launch_server"].map(String::from).to_vec();
            c.extend(argv(l, true));
            c.extend(["--host", "0.0.0.0", "--port", "30000"].map(String::from));
            (format!("lmsysorg/sglang:{}", l.image_tag), c)
        }
        // ggml-org's server image runs llama-server (its entrypoint); a local file is mounted
        // read-only at /models, a Hub model is downloaded into the mounted llama.cpp cache.
        LaunchEngine::LlamaServer => {
            let mut c = argv(&container_model(l), true);
            c.extend(["--host", "0.0.0.0", "--port", "8080"].map(String::from));
            (format!("ghcr.io/ggml-org/llama.cpp:{}", l.image_tag), c)
        }
    };
    let list = command.iter().map(|w| yaml_str(w)).collect::<Vec<_>>().join(", ");
    let mut y = image_header(l);
    let _ = writeln!(y, "services:\n  {}:", service_name(l));
    let _ = writeln!(y, "    image: {}", yaml_str(&image));
    let _ = writeln!(y, "    ipc: host");
    let _ = writeln!(y, "    ports:\n      - \"{0}:{0}\"", l.port());
    let _ = writeln!(y, "    environment:\n      - HF_TOKEN");
    for (k, v) in &l.env {
        let _ = writeln!(y, "      - {}", yaml_str(&format!("{k}={v}")));
    }
    match l.engine {
        LaunchEngine::LlamaServer if !l.is_hub_model() => {
            let _ = writeln!(y, "    volumes:\n      - {}", yaml_str(&format!("{}:/models:ro", model_dir(l))));
        }
        LaunchEngine::LlamaServer => {
            let _ = writeln!(y, "    volumes:\n      - \"${{HOME}}/.cache/llama.cpp:/root/.cache/llama.cpp\"");
        }
        _ => {
            let _ = writeln!(y, "    volumes:\n      - \"${{HOME}}/.cache/huggingface:/root/.cache/huggingface\"");
        }
    }
    let _ = writeln!(y, "    command: [{list}]");
    let _ = writeln!(y, "    deploy:\n      resources:\n        reservations:\n          devices:");
    let _ = writeln!(y, "            - driver: nvidia\n              count: {}\n              capabilities: [gpu]", l.gpus);
    y
}
