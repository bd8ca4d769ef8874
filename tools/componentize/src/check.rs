//! Whether a file is a plugin component: its world, decoded from the component, exports `handle`
//! with the type `wit/worker-plugin.wit` gives it and imports nothing but the world's interfaces
//! and WASI. (The host checks again when it loads it; this catches a wrong build early.)

use anyhow::{Context, bail};
use wit_parser::decoding::{DecodedWasm, decode};
use wit_parser::{Function, Resolve, Type, TypeDefKind, WorldId, WorldItem, WorldKey};

/// The contract, compiled in: the one WIT file of the repository.
const WORLD_WIT: &str = include_str!("../../../wit/worker-plugin.wit");

/// The export every plugin component must have.
const HANDLE: &str = "handle";

pub fn component(bytes: &[u8]) -> anyhow::Result<()> {
    match bytes.get(..8) {
        Some(b"\0asm\x0d\0\x01\0") => {}
        Some(b"\0asm\x01\0\0\0") => bail!("a core module (ABI v1?), not a component"),
        _ => bail!("not WebAssembly"),
    }
    let (want, want_world) = reference()?;
    let (got, got_world) = match decode(bytes).context("not a component")? {
        DecodedWasm::Component(resolve, world) => (resolve, world),
        DecodedWasm::WitPackage(..) => bail!("a WIT package, not a component"),
    };
    let handle = |resolve: &Resolve, world: WorldId| -> Option<Function> {
        match resolve.worlds[world]
            .exports
            .get(&WorldKey::Name(HANDLE.to_owned()))?
        {
            WorldItem::Function(f) => Some(f.clone()),
            _ => None,
        }
    };
    let expected = handle(&want, want_world).context("the world has no `handle` export")?;
    let Some(found) = handle(&got, got_world) else {
        bail!("no `{HANDLE}` function export (not built with worker_plugin_sdk::handler!?)");
    };
    let params_match = expected.params.len() == found.params.len()
        && expected
            .params
            .iter()
            .zip(&found.params)
            .all(|(a, b)| same_type(&want, &a.ty, &got, &b.ty));
    let result_match = match (&expected.result, &found.result) {
        (Some(a), Some(b)) => same_type(&want, a, &got, b),
        (None, None) => true,
        _ => false,
    };
    if !params_match || !result_match {
        bail!("`{HANDLE}` has another type than worker:plugin/handler@2.0.0 gives it");
    }
    let allowed: Vec<String> = want.worlds[want_world]
        .imports
        .keys()
        .map(|k| want.name_world_key(k))
        .collect();
    for key in got.worlds[got_world].imports.keys() {
        let name = got.name_world_key(key);
        // The world's own imports (its interfaces, and the types it `use`s), or a WASI interface.
        let known = allowed.contains(&name)
            || (matches!(key, WorldKey::Interface(_)) && name.starts_with("wasi:"));
        if !known {
            bail!("imports {name}, which is neither worker:plugin/handler@2.0.0's nor WASI's");
        }
    }
    Ok(())
}

fn reference() -> anyhow::Result<(Resolve, WorldId)> {
    let mut resolve = Resolve::default();
    let package = resolve
        .push_str("worker-plugin.wit", WORLD_WIT)
        .context("wit/worker-plugin.wit")?;
    let world = resolve.select_world(&[package], Some("handler"))?;
    Ok((resolve, world))
}

/// Structural equality of two types from two resolves: names of fields and cases, and their
/// types, through aliases.
fn same_type(a: &Resolve, ta: &Type, b: &Resolve, tb: &Type) -> bool {
    let (ta, tb) = (unalias(a, *ta), unalias(b, *tb));
    let (Type::Id(ia), Type::Id(ib)) = (ta, tb) else {
        return ta == tb;
    };
    let same = |x: &Type, y: &Type| same_type(a, x, b, y);
    let same_opt = |x: &Option<Type>, y: &Option<Type>| match (x, y) {
        (Some(x), Some(y)) => same(x, y),
        (None, None) => true,
        _ => false,
    };
    match (&a.types[ia].kind, &b.types[ib].kind) {
        (TypeDefKind::Record(x), TypeDefKind::Record(y)) => {
            x.fields.len() == y.fields.len()
                && x.fields
                    .iter()
                    .zip(&y.fields)
                    .all(|(f, g)| f.name == g.name && same(&f.ty, &g.ty))
        }
        (TypeDefKind::Variant(x), TypeDefKind::Variant(y)) => {
            x.cases.len() == y.cases.len()
                && x.cases
                    .iter()
                    .zip(&y.cases)
                    .all(|(c, d)| c.name == d.name && same_opt(&c.ty, &d.ty))
        }
        (TypeDefKind::Enum(x), TypeDefKind::Enum(y)) => {
            x.cases.len() == y.cases.len()
                && x.cases.iter().zip(&y.cases).all(|(c, d)| c.name == d.name)
        }
        (TypeDefKind::Option(x), TypeDefKind::Option(y))
        | (TypeDefKind::List(x), TypeDefKind::List(y)) => same(x, y),
        (TypeDefKind::Result(x), TypeDefKind::Result(y)) => {
            same_opt(&x.ok, &y.ok) && same_opt(&x.err, &y.err)
        }
        (TypeDefKind::Tuple(x), TypeDefKind::Tuple(y)) => {
            x.types.len() == y.types.len() && x.types.iter().zip(&y.types).all(|(s, t)| same(s, t))
        }
        _ => false,
    }
}

/// Follows `type x = y` aliases (a `use` makes one) to the defining type.
fn unalias(resolve: &Resolve, mut ty: Type) -> Type {
    while let Type::Id(id) = ty {
        match resolve.types[id].kind {
            TypeDefKind::Type(inner) => ty = inner,
            _ => break,
        }
    }
    ty
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_world_is_its_own_reference() {
        let (resolve, world) = reference().unwrap();
        let handle = &resolve.worlds[world].exports[&WorldKey::Name(HANDLE.to_owned())];
        let WorldItem::Function(f) = handle else {
            panic!("handle is not a function");
        };
        assert!(same_type(
            &resolve,
            &f.params[0].ty,
            &resolve,
            &f.params[0].ty
        ));
        assert!(!same_type(
            &resolve,
            &f.params[0].ty,
            &resolve,
            &f.result.unwrap()
        ));
    }

    #[test]
    fn a_core_module_or_garbage_is_refused() {
        let err = component(b"\0asm\x01\0\0\0").unwrap_err();
        assert!(err.to_string().contains("core module"), "{err}");
        let err = component(b"garbage!").unwrap_err();
        assert!(err.to_string().contains("not WebAssembly"), "{err}");
    }

    #[test]
    fn a_component_of_another_world_is_refused() {
        // The smallest component: no exports at all.
        let err = component(b"\0asm\x0d\0\x01\0").unwrap_err();
        assert!(err.to_string().contains("no `handle`"), "{err}");
    }
}
