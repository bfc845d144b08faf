//! What kind of file some bytes are, from their first bytes only, so a wrong file gets "this is
//! a GGUF file; `vram serve --model` reads GGUF" instead of "not valid JSON".

use serde::Serialize;

/// A file kind recognised from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FileKind {
    /// No bytes at all.
    Empty,
    /// `GGUF` magic (ggml/docs/gguf.md).
    Gguf,
    /// An 8-byte little-endian header length followed by `{` (safetensors format spec).
    Safetensors,
    /// A Python pickle: `0x80` then protocol 2 to 5 (PyTorch's legacy `.bin` / `.pt`).
    Pickle,
    /// A zip archive `PK\x03\x04` (`torch.save` since PyTorch 1.6: `.bin`, `.pt`, `.pth`).
    Zip,
    /// A Git LFS pointer: the real file was never downloaded.
    LfsPointer,
    /// An HTML page (a login or error page saved instead of the file).
    Html,
    /// Starts like JSON (`{` or `[`).
    Json,
    /// UTF-8 text that is not JSON (YAML, Python …).
    Text,
    /// Anything else.
    Unknown,
}

/// Classify a file from its first bytes (a few hundred are plenty).
pub fn sniff(bytes: &[u8]) -> FileKind {
    if bytes.is_empty() {
        return FileKind::Empty;
    }
    if bytes.starts_with(b"GGUF") {
        return FileKind::Gguf;
    }
    if bytes.starts_with(b"PK\x03\x04") {
        return FileKind::Zip;
    }
    // pickle PROTO opcode (0x80) and a protocol number (Lib/pickle.py); torch.save used 2.
    if bytes[0] == 0x80 && bytes.get(1).is_some_and(|p| (2..=5).contains(p)) {
        return FileKind::Pickle;
    }
    if is_safetensors(bytes) {
        return FileKind::Safetensors;
    }
    let head = &bytes[..bytes.len().min(512)];
    let text = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head);
    if text.contains(&0) || !utf8_prefix(text) {
        return FileKind::Unknown;
    }
    let trimmed = text.trim_ascii_start();
    if trimmed.starts_with(b"version https://git-lfs") {
        FileKind::LfsPointer
    } else if trimmed.starts_with(b"<") {
        FileKind::Html
    } else if trimmed.starts_with(b"{") || trimmed.starts_with(b"[") {
        FileKind::Json
    } else {
        FileKind::Text
    }
}

/// A safetensors file: header length between 2 bytes and the 100 MB limit, then `{`.
fn is_safetensors(b: &[u8]) -> bool {
    crate::safetensors::header_len(b, "").is_ok_and(|n| n >= 2) && b.get(8) == Some(&b'{')
}

/// Whether `b` is UTF-8, allowing a character cut at the end.
fn utf8_prefix(b: &[u8]) -> bool {
    match std::str::from_utf8(b) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    }
}

impl FileKind {
    /// What the file is, for a sentence ("{file} is a GGUF file").
    pub fn describe(self) -> &'static str {
        match self {
            FileKind::Empty => "empty",
            FileKind::Gguf => "a GGUF file (llama.cpp / Ollama weights)",
            FileKind::Safetensors => "a safetensors weights file",
            FileKind::Pickle => "a PyTorch pickle (.bin / .pt weights)",
            FileKind::Zip => "a zip archive (PyTorch .bin / .pt weights saved by torch.save)",
            FileKind::LfsPointer => "a Git LFS pointer, not the file itself",
            FileKind::Html => "an HTML page",
            FileKind::Json => "JSON",
            FileKind::Text => "text that is not JSON",
            FileKind::Unknown => "a binary file of unknown kind",
        }
    }

    /// What to do instead, when the user passed this file as a config.json.
    pub fn hint(self) -> &'static str {
        match self {
            FileKind::Gguf => "`vram serve --model FILE.gguf` reads GGUF files",
            FileKind::Safetensors | FileKind::Pickle | FileKind::Zip => {
                "pass the model directory (holding config.json next to the weights) or its config.json"
            }
            FileKind::LfsPointer => "the real file was never downloaded: run `git lfs pull` in the model repository",
            FileKind::Html => "a login or error page was saved instead of the file: download config.json again",
            _ => "pass a Hugging Face config.json, a model directory, or a preset name (`vram models` lists them)",
        }
    }

    /// Whether a JSON parser's error is the useful message for this kind (it looks like JSON
    /// or plain text, so the syntax error position matters).
    pub fn is_textual(self) -> bool {
        matches!(self, FileKind::Json | FileKind::Text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_each_kind() {
        let mut st = 20u64.to_le_bytes().to_vec();
        st.extend(b"{\"a\":1}");
        for (b, k) in [
            (&b""[..], FileKind::Empty),
            (b"GGUF\x03\0\0\0", FileKind::Gguf),
            (&st, FileKind::Safetensors),
            (b"\x80\x02}q\0", FileKind::Pickle),
            (b"PK\x03\x04\x14\0", FileKind::Zip),
            (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab", FileKind::LfsPointer),
            (b"<!DOCTYPE html><html>", FileKind::Html),
            (b"\xEF\xBB\xBF  {\"model_type\":", FileKind::Json),
            (b"model_type: llama\n", FileKind::Text),
            (b"\x00\x01\x02\x03", FileKind::Unknown),
            (b"\xff\xfe\xfd", FileKind::Unknown),
        ] {
            assert_eq!(sniff(b), k, "{b:?}");
        }
    }
}
