//! Writes a full-size, zero-weight GGUF with the shapes of a public model (sparse: the weights
//! take no disk) for the llama.cpp runs on a real GPU in validation/llamacpp/.
//!     cargo run --release -p vram-core --example synthetic_gguf -- NAME OUT.gguf
//! NAME: llama-3.1-8b, qwen3-30b-a3b, gpt-oss-20b or gemma-3-12b.
#[path = "../tests/support/gguf_writer.rs"]
mod gguf_writer;
#[path = "../tests/support/synthetic_models.rs"]
mod synthetic_models;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, out] = args.as_slice() else {
        eprintln!("usage: synthetic_gguf NAME OUT.gguf (NAME: {})", synthetic_models::NAMES.join(", "));
        std::process::exit(2);
    };
    let Some(w) = synthetic_models::by_name(name) else {
        eprintln!("error: no model {name:?}; known: {}", synthetic_models::NAMES.join(", "));
        std::process::exit(2);
    };
    let path = std::path::Path::new(out);
    if path.exists() {
        eprintln!("error: {out} exists; not overwritten");
        std::process::exit(2);
    }
    match w.write_file(path) {
        Ok(len) => println!("{out}: {len} bytes ({name})"),
        Err(e) => {
            eprintln!("error: writing {out}: {e}");
            std::process::exit(1);
        }
    }
}
