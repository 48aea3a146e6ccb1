//! The layering rule of `src/lib.rs`, checked: every `crate::` path in the
//! library's non-test code names a module of the same row or a row above
//! it in lib.rs's module table. A change that imports upward (the loop
//! reaching into the scripts, the UI into the CLI) fails here.

use std::collections::BTreeSet;
use std::path::Path;

/// The modules in the order of lib.rs's table, read from lib.rs itself so
/// the documentation and this check cannot drift apart.
fn table_order(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|l| l.strip_prefix("//! |"))
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let module = cells.get(1)?;
            let name = module.strip_prefix("[`")?.strip_suffix("`]")?;
            Some(name.to_string())
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_imports_a_layer_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let order = table_order(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    assert!(order.len() >= 14, "lib.rs's table lists {order:?}");
    let rank = |m: &str| order.iter().position(|o| o == m);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut upward = BTreeSet::new();
    for file in files {
        let rel = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let top = rel
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let from = rank(&top).unwrap_or_else(|| panic!("{top} is not in lib.rs's table"));
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (i, _) in code.match_indices("crate::") {
            let name: String = code
                .get(i + "crate::".len()..)
                .unwrap_or("")
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if let Some(to) = rank(&name)
                && to > from
            {
                upward.insert(format!("{rel} uses crate::{name}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layering of lib.rs:\n{upward:#?}"
    );
}
