//! Every README example is real output: a fenced block whose first line is `$ vram …` must be
//! exactly what that command prints today. Numbers move when the model improves, so
//! `VRAM_UPDATE_README=1 cargo test -p vram --test all readme::` rewrites the blocks from the binary;
//! review the diff like code.

mod util;

use std::path::PathBuf;

/// One example: where its output lines sit in the README, the command, the output shown.
struct Example {
    /// Index of the `$ vram` line.
    command_line: usize,
    /// Index of the closing fence.
    end: usize,
    args: Vec<String>,
}

fn readme_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../README.md")
}

/// The examples, in order.
fn examples(lines: &[&str]) -> Vec<Example> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let opens = lines[i].starts_with("```");
        let command = lines.get(i + 1).and_then(|l| l.strip_prefix("$ vram "));
        if let (true, Some(cmd)) = (opens, command) {
            let end = (i + 2..lines.len()).find(|&j| lines[j].starts_with("```")).expect("closed fence");
            out.push(Example { command_line: i + 1, end, args: cmd.split_whitespace().map(String::from).collect() });
            i = end + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// What the command prints, lines right-trimmed (the README keeps no trailing blanks).
fn real_output(args: &[String]) -> Vec<String> {
    // From the repository root, as a reader runs them (paths such as validation/… resolve).
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = util::vram().args(args).current_dir(root).env("HF_HUB_OFFLINE", "1").output().expect("runs");
    assert!(
        out.status.success() || out.status.code() == Some(3),
        "README example `vram {}` fails: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim_end().lines().map(|l| l.trim_end().to_string()).collect()
}

#[test]
fn readme_examples_are_real_output() {
    let path = readme_path();
    let text = std::fs::read_to_string(&path).expect("README.md");
    let lines: Vec<&str> = text.lines().collect();
    let examples = examples(&lines);
    assert!(examples.len() >= 4, "found only {} `$ vram` examples in the README", examples.len());
    let update = std::env::var_os("VRAM_UPDATE_README").is_some();
    let mut rewritten: Vec<String> = Vec::new();
    let mut next = 0;
    let mut stale = Vec::new();
    for ex in &examples {
        let real = real_output(&ex.args);
        let shown: Vec<String> = lines[ex.command_line + 1..ex.end].iter().map(|l| l.trim_end().to_string()).collect();
        if real != shown {
            stale.push(format!("$ vram {}", ex.args.join(" ")));
        }
        rewritten.extend(lines[next..=ex.command_line].iter().map(|l| l.to_string()));
        rewritten.extend(real);
        next = ex.end;
    }
    rewritten.extend(lines[next..].iter().map(|l| l.to_string()));
    if update {
        std::fs::write(&path, rewritten.join("\n") + "\n").expect("write README.md");
        return;
    }
    assert!(
        stale.is_empty(),
        "README examples differ from the binary's output (run `VRAM_UPDATE_README=1 cargo test -p vram --test all readme::` and review the diff):\n{}",
        stale.join("\n")
    );
}
