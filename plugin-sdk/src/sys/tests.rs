//! The names Rust makes the SDK write as literals (the `link` attribute of the imports, the
//! exported function names of `handler!`) are checked against `worker_abi`, with the signatures
//! the imports are declared with.

use std::collections::BTreeMap;

use worker_abi::{ABI_MODULE, ValType, export, import};

const WASM_RS: &str = include_str!("v1.rs");
const EXPORT_RS: &str = include_str!("../export.rs");

/// The wasm32 ABI type of a Rust parameter or result type in the extern block.
fn wasm_type(rust: &str) -> ValType {
    match rust.trim() {
        "i32" | "usize" | "*const u8" | "*mut u8" => ValType::I32,
        "i64" => ValType::I64,
        other => panic!("v1.rs: no ABI type for `{other}`"),
    }
}

/// Every function of the `extern` block: its import name (the `link_name`, else the Rust name)
/// with its parameter and result types.
fn declared_imports() -> BTreeMap<String, (Vec<ValType>, Vec<ValType>)> {
    let start = WASM_RS
        .find("unsafe extern \"C\" {")
        .expect("an extern block");
    let block = &WASM_RS[start..];
    let block = &block[block.find('{').expect("open") + 1..block.find("\n}").expect("close")];
    let mut out = BTreeMap::new();
    for decl in block.split(';').map(str::trim).filter(|d| !d.is_empty()) {
        let link_name = decl
            .strip_prefix("#[link_name = \"")
            .and_then(|rest| rest.split_once('"'))
            .map(|(name, _)| name.to_owned());
        let sig = &decl[decl.find("fn ").expect("a fn") + 3..];
        let (rust_name, rest) = sig.split_once('(').expect("params");
        let (params, ret) = rest.rsplit_once(')').expect("params end");
        let params = params
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| wasm_type(p.split_once(':').expect("name: type").1))
            .collect();
        let results = ret
            .trim()
            .strip_prefix("->")
            .map(|r| vec![wasm_type(r)])
            .unwrap_or_default();
        let name = link_name.unwrap_or_else(|| rust_name.trim().to_owned());
        assert!(
            out.insert(name.clone(), (params, results)).is_none(),
            "{name} twice"
        );
    }
    out
}

#[test]
fn imports_come_from_the_abi_module() {
    let attribute = format!("#[link(wasm_import_module = \"{ABI_MODULE}\")]");
    assert!(WASM_RS.contains(&attribute), "v1.rs lacks {attribute}");
    assert_eq!(WASM_RS.matches("wasm_import_module").count(), 1);
}

#[test]
fn imports_are_declared_as_the_abi_defines_them() {
    let declared = declared_imports();
    for import in import::ALL {
        let (params, results) = declared
            .get(import.name)
            .unwrap_or_else(|| panic!("v1.rs does not declare `{}`", import.name));
        assert_eq!(
            (params.as_slice(), results.as_slice()),
            (import.signature.params, import.signature.results),
            "`{}` is declared differently from {}",
            import.name,
            import.signature
        );
    }
    assert_eq!(declared.len(), import::ALL.len(), "{declared:?}");
}

#[test]
fn handler_exports_the_abi_names() {
    let marker = format!("pub extern \"C\" fn {}() {{}}", export::MARKER);
    let handle = format!("pub extern \"C\" fn {}() -> i32 {{", export::HANDLE);
    assert!(EXPORT_RS.contains(&marker), "export.rs lacks {marker}");
    assert!(EXPORT_RS.contains(&handle), "export.rs lacks {handle}");
}
