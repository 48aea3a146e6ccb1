//! The built-in tools: `run_shell`, `read_file`, `write_file`, `edit_file`
//! and `list_dir`. (Stub; implementation in progress.)

use std::sync::Arc;

use super::Tool;

/// Every built-in tool, in the order the model sees them.
pub fn all() -> Vec<Arc<dyn Tool>> {
    Vec::new()
}
