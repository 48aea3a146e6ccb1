//! The built-in tools: `run_shell`, `read_file`, `write_file`, `edit_file`,
//! `list_dir`, `grep` and `glob`, one file each, plus their model-facing
//! texts in [`messages`].
//!
//! Every tool reaches the machine through `runtime` (processes through
//! `runtime::process`, files through a `runtime::beneath::Located` handle
//! from `Runtime::locate`, which no symlink can lead out of), runs blocking
//! file IO on tokio's blocking pool, and reports every failure as a failed
//! [`ToolOutput`] that says what went wrong and what to do next.

mod edit;
mod glob;
mod grep;
mod list;
pub mod messages;
mod read;
mod shell;
mod write;

use std::sync::Arc;

use super::{Tool, ToolContext};
use crate::protocol::{ErrorKind, ToolOutput};
use crate::runtime::beneath::{AccessError, Located};

pub use edit::EditFile;
pub use glob::Glob;
pub use grep::Grep;
pub use list::ListDir;
pub use read::ReadFile;
/// `read_file`'s limits, which the script API's `read_file` obeys too.
pub use read::{DEFAULT_LIMIT as READ_LINE_LIMIT, OUTPUT_BYTE_CAP as READ_BYTE_CAP};
pub use shell::RunShell;
pub use write::WriteFile;

/// Every built-in tool, in the order the model sees them.
pub fn all() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(RunShell::new()),
        Arc::new(ReadFile::new()),
        Arc::new(WriteFile::new()),
        Arc::new(EditFile::new()),
        Arc::new(ListDir::new()),
        Arc::new(Grep::new()),
        Arc::new(Glob::new()),
    ]
}

/// Places a path argument beneath the workspace (or another allowed
/// root), or returns the output that tells the model why it cannot be used.
fn resolve_path(ctx: &ToolContext, path: &str) -> Result<Located, ToolOutput> {
    ctx.runtime.locate(path).map_err(|reason| {
        ToolOutput::failed(ErrorKind::InvalidArgs, messages::bad_path(path, &reason))
    })
}

/// The output for an access refused or failed beneath the root, for the
/// cases every file tool words the same way; `None` for the ones each tool
/// words itself (missing, directory).
fn access_failed(action: &str, shown: &str, err: &AccessError) -> Option<ToolOutput> {
    let out = match err {
        AccessError::Outside { .. } | AccessError::TooManyLinks => ToolOutput::failed(
            ErrorKind::InvalidArgs,
            messages::bad_path(shown, &err.to_string()),
        ),
        AccessError::NotRegular { kind } => failed(messages::not_regular(action, shown, kind)),
        AccessError::HardLinked { links } => failed(messages::read_hard_linked(shown, *links)),
        AccessError::Protected { dir } => ToolOutput::failed(
            ErrorKind::Denied,
            messages::write_protected(shown, &dir.display().to_string()),
        ),
        AccessError::GitMetadata { .. } => {
            ToolOutput::failed(ErrorKind::Denied, messages::write_git_metadata(shown))
        }
        AccessError::Io(e) => failed(messages::io_failed(action, shown, e)),
        AccessError::NotDir | AccessError::Changed => {
            failed(messages::access_failed(action, shown, &err.to_string()))
        }
        AccessError::NotFound | AccessError::IsDir => return None,
    };
    Some(out)
}

/// What a file tool does with its path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// The common start of a file tool: stop if the turn was interrupted,
/// resolve and confine the path, and for a write ask the policy. `Err` is
/// the output that ends the call.
async fn target(ctx: &ToolContext, shown: &str, access: Access) -> Result<Located, ToolOutput> {
    if ctx.cancel.is_cancelled() {
        return Err(cancelled());
    }
    let place = resolve_path(ctx, shown)?;
    if access == Access::Write {
        ctx.runtime
            .check_write(&place.path)
            .await
            .map_err(|text| ToolOutput::failed(ErrorKind::Denied, text))?;
    }
    Ok(place)
}

/// The output for a call that arrives after the turn was interrupted.
fn cancelled() -> ToolOutput {
    ToolOutput::failed(ErrorKind::Cancelled, super::messages::CANCELLED)
}

/// Runs blocking file work on tokio's blocking pool.
async fn blocking<F>(work: F) -> ToolOutput
where
    F: FnOnce() -> ToolOutput + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(output) => output,
        Err(e) => ToolOutput::failed(ErrorKind::Failed, messages::task_failed(&e.to_string())),
    }
}

/// Shorthand for the most common failure.
fn failed(text: impl Into<String>) -> ToolOutput {
    ToolOutput::failed(ErrorKind::Failed, text)
}

/// Helpers shared by the tools' tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::path::Path;
    use std::sync::Arc;

    use serde_json::Value;
    use tokio_util::sync::CancellationToken;

    use crate::protocol::{ToolCall, ToolOutput};
    use crate::runtime::Runtime;
    use crate::tools::{Registry, ToolContext};

    /// A context whose workspace is `dir` and whose spill dir is inside it.
    pub fn ctx(dir: &Path) -> ToolContext {
        ToolContext::new(
            Arc::new(Runtime::new(
                dir.to_path_buf(),
                dir.join(".spill"),
                Vec::new(),
            )),
            CancellationToken::new(),
            "call_1",
        )
    }

    /// Calls a tool through the registry, so schema checks run too.
    pub async fn call(dir: &Path, name: &str, args: Value) -> ToolOutput {
        let call = ToolCall {
            id: "call_1".to_string(),
            name: name.to_string(),
            arguments: args.to_string(),
        };
        Registry::with_builtins().dispatch(&call, ctx(dir)).await
    }
}

#[cfg(test)]
mod tests {
    use crate::tools::Registry;

    #[test]
    fn builtins_come_in_order_with_object_schemas() {
        let registry = Registry::with_builtins();
        assert_eq!(
            registry.names(),
            [
                "run_shell",
                "read_file",
                "write_file",
                "edit_file",
                "list_dir",
                "grep",
                "glob"
            ]
        );
        for tool in registry.tools() {
            let params = &tool.spec().parameters;
            assert_eq!(params["type"], "object", "{}", tool.spec().name);
            for (name, prop) in params["properties"].as_object().into_iter().flatten() {
                assert!(
                    prop["description"].as_str().is_some_and(|d| !d.is_empty()),
                    "{}.{name} has no description",
                    tool.spec().name
                );
            }
        }
    }
}
