//! Answer one request natively, as the page's wasm would: `cargo run -p vram-wasm --example call
//! -- '{"op": "estimate", "model": "gpt2"}'` prints the JSON response (pretty). Used by
//! scripts/web-test.sh to diff the page's JSON against the CLI's `--json`.

fn main() {
    let Some(request) = std::env::args().nth(1) else {
        eprintln!("usage: call '<JSON request>'");
        std::process::exit(2);
    };
    let response = vram_wasm::handle(&request);
    println!("{}", serde_json::to_string_pretty(&response).unwrap_or_default());
    if response.get("error").is_some() {
        std::process::exit(2);
    }
}
