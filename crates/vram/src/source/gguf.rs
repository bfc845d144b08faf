//! A `.gguf` file's header, read as a growing prefix (never the tensor data).

use anyhow::Result;

use crate::errors::UsageError;

/// Largest GGUF header read (tokenizer vocabularies and merges reach tens of MB).
const MAX_GGUF_HEADER: u64 = 256 << 20;

/// Read a `.gguf` file's header only: a growing prefix until the tensor infos end.
pub fn read_gguf(path: &std::path::Path) -> Result<vram_core::gguf::Gguf> {
    use std::io::Read;
    use vram_core::gguf::{parse, Parsed};
    let shown = path.display().to_string();
    let mut f = super::local::open_regular(path)?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
    let mut buf = Vec::new();
    let mut want: u64 = 1 << 20;
    loop {
        let have = buf.len() as u64;
        if want > have {
            (&mut f).take(want - have).read_to_end(&mut buf).map_err(|e| UsageError(format!("cannot read {shown}: {e}")))?;
        }
        match parse(&buf, &shown)? {
            Parsed::Complete(g) => return Ok(*g),
            Parsed::NeedMore(n) => {
                if (buf.len() as u64) < want || n > len {
                    return Err(UsageError(format!(
                        "{shown} ends inside its GGUF header ({} bytes, the header needs {n}): the file is truncated",
                        buf.len()
                    ))
                    .into());
                }
                if n > MAX_GGUF_HEADER {
                    return Err(
                        UsageError(format!("{shown}: the GGUF header claims more than {} MiB; refusing", MAX_GGUF_HEADER >> 20)).into()
                    );
                }
                want = n.max(want * 2).min(MAX_GGUF_HEADER);
            }
        }
    }
}
