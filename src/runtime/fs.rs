//! Paths and files for the file tools. (Interface stub; implementation in progress.)

use std::path::{Path, PathBuf};

/// Resolves a path the model gave against the workspace root.
pub fn resolve(workspace: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        workspace.join(p)
    }
}
