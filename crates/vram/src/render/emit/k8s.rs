//! `--emit k8s`: a Kubernetes Deployment and Service. GPUs as the NVIDIA device plugin's
//! `nvidia.com/gpu` limit; `/dev/shm` as a memory-backed emptyDir (the container default of
//! 64 MiB is too small for NCCL and PyTorch workers); readiness on the engine's `/health`.

use std::fmt::Write;

use super::launch::{argv, image_header, service_name, yaml_str, Launch, LaunchEngine};

/// The manifest: a Deployment, `---`, a Service.
pub fn manifest(l: &Launch) -> String {
    let name = service_name(l);
    let port = l.port();
    let (image, command, args) = match l.engine {
        LaunchEngine::Vllm => (format!("vllm/vllm-openai:{}", l.image_tag), None, argv(l, true)),
        LaunchEngine::Sglang => {
            let mut a = argv(l, true);
            a.extend(["--host".into(), "0.0.0.0".into(), "--port".into(), port.to_string()]);
            (format!("lmsysorg/sglang:{}", l.image_tag), Some(["python3", "-m", "sglang.launch_server"]), a)
        }
        // A Hub model only (the caller refuses a local file): llama-server downloads it.
        LaunchEngine::LlamaServer => {
            let mut a = argv(l, true);
            a.extend(["--host".into(), "0.0.0.0".into(), "--port".into(), port.to_string()]);
            (format!("ghcr.io/ggml-org/llama.cpp:{}", l.image_tag), None, a)
        }
    };
    let list = |v: &[String]| v.iter().map(|w| yaml_str(w)).collect::<Vec<_>>().join(", ");
    let mut y = image_header(l);
    let _ = writeln!(y, "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  labels:\n    app: {name}");
    let _ = writeln!(y, "spec:\n  replicas: 1\n  selector:\n    matchLabels:\n      app: {name}");
    let _ = writeln!(y, "  template:\n    metadata:\n      labels:\n        app: {name}\n    spec:\n      containers:");
    let _ = writeln!(y, "        - name: {}\n          image: {}", engine_name(l), yaml_str(&image));
    if let Some(c) = command {
        let _ = writeln!(y, "          command: [{}]", list(&c.map(String::from)));
    }
    let _ = writeln!(y, "          args: [{}]", list(&args));
    let _ = writeln!(y, "          env:\n            - name: HF_TOKEN\n              valueFrom:\n                secretKeyRef:\n                  name: hf-token\n                  key: token\n                  optional: true");
    for (k, v) in &l.env {
        let _ = writeln!(y, "            - name: {k}\n              value: {}", yaml_str(v));
    }
    let _ = writeln!(y, "          ports:\n            - containerPort: {port}");
    let _ = writeln!(y, "          resources:\n            limits:\n              nvidia.com/gpu: {}", l.gpus);
    let _ = writeln!(y, "          readinessProbe:\n            httpGet:\n              path: /health\n              port: {port}\n            initialDelaySeconds: 60\n            periodSeconds: 10");
    let cache = if l.engine == LaunchEngine::LlamaServer { "/root/.cache/llama.cpp" } else { "/root/.cache/huggingface" };
    let _ = writeln!(y, "          volumeMounts:\n            - name: shm\n              mountPath: /dev/shm\n            - name: hf-cache\n              mountPath: {cache}");
    let _ = writeln!(y, "      volumes:\n        - name: shm\n          emptyDir:\n            medium: Memory\n        - name: hf-cache\n          emptyDir: {{}}");
    let _ = writeln!(y, "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  selector:\n    app: {name}");
    let _ = writeln!(y, "  ports:\n    - port: {port}\n      targetPort: {port}");
    y
}

fn engine_name(l: &Launch) -> &'static str {
    match l.engine {
        LaunchEngine::Vllm => "vllm",
        LaunchEngine::Sglang => "sglang",
        LaunchEngine::LlamaServer => "llama-server",
    }
}
