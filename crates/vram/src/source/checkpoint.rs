//! Raw checkpoint facts (safetensors headers) folded into the normalised model.

use vram_core::safetensors::CheckpointSummary;
use vram_core::Model;

/// Record what the safetensors headers say: exact element count and stored dtype.
pub fn apply_summary(model: &mut Model, summary: &CheckpointSummary) {
    let from_config = model.parameters();
    model.checkpoint_parameters = Some(summary.parameters);
    if let Some(d) = summary.main_dtype() {
        model.stored_dtype = Some(d);
    }
    if summary.parameters != from_config {
        model.warnings.push(format!(
            "the safetensors headers hold {} elements, the config implies {} parameters (a duplicated tied lm_head, packed quantised weights, or extra tensors); the memory model uses the config's",
            summary.parameters, from_config
        ));
    }
}
