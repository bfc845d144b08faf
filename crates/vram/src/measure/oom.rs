//! Recognise an out-of-memory death from a child's stderr.

/// Which framework reported running out of GPU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Oom {
    /// PyTorch `torch.OutOfMemoryError: CUDA out of memory`.
    #[serde(rename = "pytorch")]
    PyTorch,
    /// JAX / XLA `RESOURCE_EXHAUSTED: Out of memory`.
    Jax,
    /// TensorFlow `OOM when allocating tensor` / `ResourceExhaustedError`.
    TensorFlow,
    /// CUDA itself (`CUDA error: out of memory`, `CUBLAS_STATUS_ALLOC_FAILED`).
    Cuda,
}

impl Oom {
    /// Plain-language description.
    pub fn describe(self) -> &'static str {
        match self {
            Oom::PyTorch => "PyTorch ran out of GPU memory (torch.OutOfMemoryError)",
            Oom::Jax => "JAX/XLA ran out of GPU memory (RESOURCE_EXHAUSTED)",
            Oom::TensorFlow => "TensorFlow ran out of GPU memory (ResourceExhaustedError)",
            Oom::Cuda => "a CUDA allocation failed (out of memory)",
        }
    }
}

/// The OOM a line of stderr reports, if any.
pub fn detect(line: &str) -> Option<Oom> {
    if line.contains("CUDA out of memory") || line.contains("OutOfMemoryError") {
        Some(Oom::PyTorch)
    } else if line.contains("RESOURCE_EXHAUSTED") && (line.contains("Out of memory") || line.contains("out of memory")) {
        Some(Oom::Jax)
    } else if line.contains("OOM when allocating tensor") || line.contains("ResourceExhaustedError") {
        Some(Oom::TensorFlow)
    } else if line.contains("CUDA error: out of memory")
        || line.contains("CUBLAS_STATUS_ALLOC_FAILED")
        || line.contains("cudaErrorMemoryAllocation")
    {
        Some(Oom::Cuda)
    } else {
        None
    }
}

/// Finds an OOM message in a byte stream that arrives in arbitrary chunks: each chunk is
/// scanned together with the unfinished line before it (its last `CARRY` bytes), so a message
/// split across two reads is still seen, while memory stays bounded on a line that never ends.
#[derive(Debug, Default)]
pub struct Scanner {
    carry: Vec<u8>,
    found: Option<Oom>,
}

/// Longest tail of an unfinished line kept for the next chunk; every message `detect` looks for
/// is far shorter.
const CARRY: usize = 512;

impl Scanner {
    /// Scan the next chunk.
    pub fn feed(&mut self, chunk: &[u8]) {
        self.carry.extend_from_slice(chunk);
        let text = String::from_utf8_lossy(&self.carry);
        for line in text.split(['\n', '\r']) {
            if self.found.is_none() {
                self.found = detect(line);
            }
        }
        // Keep only the unfinished last line, at most CARRY bytes of it.
        let last_break = self.carry.iter().rposition(|b| *b == b'\n' || *b == b'\r').map_or(0, |i| i + 1);
        let keep_from = last_break.max(self.carry.len().saturating_sub(CARRY));
        self.carry.drain(..keep_from);
    }

    /// The first OOM seen, if any.
    pub fn found(&self) -> Option<Oom> {
        self.found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_split_across_chunks_is_found() {
        let mut s = Scanner::default();
        s.feed(b"step 1\rstep 2 \xff torch.OutOfMem");
        assert_eq!(s.found(), None);
        s.feed(b"oryError: CUDA out of memory.");
        assert_eq!(s.found(), Some(Oom::PyTorch));
        // A line that never ends keeps memory bounded.
        let mut s = Scanner::default();
        for _ in 0..1000 {
            s.feed(&[b'x'; 4096]);
        }
        assert!(s.carry.len() <= CARRY);
        // Two halves of JAX's message on different lines are not one message.
        let mut s = Scanner::default();
        s.feed(b"RESOURCE_EXHAUSTED: too many open files\n");
        s.feed(b"out of memory?\n");
        assert_eq!(s.found(), None);
    }

    #[test]
    fn real_error_texts() {
        // The exact formats the frameworks print.
        let torch = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.91 GiB memory in use.";
        assert_eq!(detect(torch), Some(Oom::PyTorch));
        let jax = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.";
        assert_eq!(detect(jax), Some(Oom::Jax));
        let tf = "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[8192,8192] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc";
        assert_eq!(detect(tf), Some(Oom::TensorFlow));
        assert_eq!(detect("RuntimeError: CUDA error: out of memory"), Some(Oom::Cuda));
        assert_eq!(detect("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), Some(Oom::Cuda));
        assert_eq!(detect("loss 2.31 step 100"), None);
        assert_eq!(detect("RESOURCE_EXHAUSTED: too many open files"), None);
    }
}
