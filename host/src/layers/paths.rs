//! Reading which modules a source file names: its code with comments and literals blanked, then
//! every path that starts at `crate::`, `super::` or `self::`, with `{a, b::c}` groups expanded
//! and `super`/`self` resolved against the file's module (and the inline `mod x { ... }` blocks
//! around the path). Enough of Rust's syntax for the layer and circle tests, no more.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module's path from the crate root: `["capability", "sql"]`.
pub(super) type ModPath = Vec<String>;

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The text with comments, string literals and char literals blanked (newlines kept), so that
/// what is left is code.
pub(super) fn code_only(text: &str) -> Vec<char> {
    let t: Vec<char> = text.chars().collect();
    let n = t.len();
    let mut out = t.clone();
    let starts = |i: usize, s: &str| s.chars().enumerate().all(|(k, c)| t.get(i + k) == Some(&c));
    let mut i = 0;
    while i < n {
        let c = t[i];
        let end = if starts(i, "//") {
            (i..n).find(|&j| t[j] == '\n').unwrap_or(n)
        } else if starts(i, "/*") {
            let (mut depth, mut j) = (0, i);
            while j < n {
                if starts(j, "/*") {
                    depth += 1;
                    j += 2;
                } else if starts(j, "*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            j
        } else if let Some(end) = raw_string(&t, i) {
            end
        } else if c == '"' {
            let mut j = i + 1;
            while j < n && t[j] != '"' {
                j += if t[j] == '\\' { 2 } else { 1 };
            }
            j + 1
        } else if c == '\'' && t.get(i + 1) == Some(&'\\') {
            (i + 2..n).find(|&j| t[j] == '\'').map_or(n, |j| j + 1)
        } else if c == '\'' && t.get(i + 2) == Some(&'\'') {
            i + 3
        } else {
            i += 1;
            continue;
        };
        for ch in &mut out[i..end.min(n)] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        i = end;
    }
    out
}

/// The end of a raw string `r"..."` / `r#"..."#` starting at `i`, if one does.
fn raw_string(t: &[char], i: usize) -> Option<usize> {
    if t[i] != 'r'
        || (i > 0 && is_ident(t[i - 1]) && !(t[i - 1] == 'b' && (i < 2 || !is_ident(t[i - 2]))))
    {
        return None;
    }
    let hashes = t[i + 1..].iter().take_while(|&&c| c == '#').count();
    if t.get(i + 1 + hashes) != Some(&'"') {
        return None;
    }
    let body = i + 2 + hashes;
    let closes = |j: usize| t[j] == '"' && (1..=hashes).all(|k| t.get(j + k) == Some(&'#'));
    Some(
        (body..t.len())
            .find(|&j| closes(j))
            .map_or(t.len(), |j| j + 1 + hashes),
    )
}

/// Where a found path starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Start {
    /// `crate::`
    Crate,
    /// `super::` or `self::`, resolved against the file's module.
    Relative,
}

/// Every path in `code` (from [`code_only`]) of the file whose module is `own`, as module
/// paths from the crate root: one per member of a `{...}` group.
pub(super) fn paths(code: &[char], own: &[String]) -> Vec<(Start, ModPath)> {
    let mut found = Vec::new();
    let mut inline: Vec<(usize, String)> = Vec::new(); // (depth inside, name)
    let mut depth = 0usize;
    let mut i = 0;
    while i < code.len() {
        let boundary = i == 0 || !is_ident(code[i - 1]);
        match code[i] {
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                while inline.last().is_some_and(|(d, _)| *d > depth) {
                    inline.pop();
                }
            }
            _ if boundary && word_at(code, i, "mod") => {
                if let Some((name, open)) = inline_mod(code, i + 3) {
                    depth += 1;
                    inline.push((depth, name));
                    i = open + 1;
                    continue;
                }
            }
            _ if boundary => {
                let here: ModPath = own
                    .iter()
                    .cloned()
                    .chain(inline.iter().map(|(_, n)| n.clone()))
                    .collect();
                let starts = [
                    ("crate::", Start::Crate, Vec::new()),
                    (
                        "super::",
                        Start::Relative,
                        here[..here.len().saturating_sub(1)].to_vec(),
                    ),
                    ("self::", Start::Relative, here.clone()),
                ];
                if let Some((prefix, start, base)) =
                    starts.into_iter().find(|(p, _, _)| word_at(code, i, p))
                {
                    let mut out = Vec::new();
                    i = read_path(code, i + prefix.len(), base, &mut out);
                    found.extend(out.into_iter().map(|p| (start, p)));
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

fn word_at(code: &[char], i: usize, word: &str) -> bool {
    let len = word.chars().count();
    word.chars()
        .enumerate()
        .all(|(k, c)| code.get(i + k) == Some(&c))
        && (word.ends_with(':') || !code.get(i + len).is_some_and(|&c| is_ident(c)))
}

/// After `mod` at `i`: the name of an inline module and where its `{` is.
fn inline_mod(code: &[char], mut i: usize) -> Option<(String, usize)> {
    while code.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    let start = i;
    while code.get(i).is_some_and(|&c| is_ident(c)) {
        i += 1;
    }
    let name: String = code[start..i].iter().collect();
    while code.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    (!name.is_empty() && code.get(i) == Some(&'{')).then_some((name, i))
}

/// Reads the path after a prefix at `i`, from `base`; pushes every full path (one per member
/// of a group) and returns where it ends.
fn read_path(code: &[char], mut i: usize, mut segs: ModPath, out: &mut Vec<ModPath>) -> usize {
    loop {
        while code.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        if code.get(i) == Some(&'{') {
            let (members, close) = group(code, i);
            for (a, b) in members {
                read_path(&code[..b], a, segs.clone(), out);
            }
            return close + 1;
        }
        let start = i;
        while code.get(i).is_some_and(|&c| is_ident(c)) {
            i += 1;
        }
        let name: String = code[start..i].iter().collect();
        match name.as_str() {
            "" => {
                out.push(segs);
                return i;
            }
            "super" => {
                segs.pop();
            }
            "self" => {}
            _ => segs.push(name),
        }
        let mut j = i;
        while code.get(j).is_some_and(|c| c.is_whitespace()) {
            j += 1;
        }
        if code.get(j) == Some(&':') && code.get(j + 1) == Some(&':') {
            i = j + 2;
        } else {
            out.push(segs);
            return i;
        }
    }
}

/// The members of the `{...}` group opening at `open` (their ranges) and where it closes.
fn group(code: &[char], open: usize) -> (Vec<(usize, usize)>, usize) {
    let (mut depth, mut start, mut members) = (0, open + 1, Vec::new());
    for (j, &c) in code.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    members.push((start, j));
                    return (members, j);
                }
            }
            ',' if depth == 1 => {
                members.push((start, j));
                start = j + 1;
            }
            _ => {}
        }
    }
    (members, code.len())
}

/// The module of a source file: `capability/sql/mod.rs` and `capability/sql.rs` are both
/// `["capability", "sql"]`; `lib.rs` is the root.
pub(super) fn module_of(rel: &Path) -> ModPath {
    let mut parts: ModPath = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// Which files each file uses, by the paths in its code: a path means the file of the longest
/// module prefix it names (`crate::a::b::Item` → `a/b.rs` if there is one, else `a.rs`). A
/// module's own submodules are its parts (it declares and re-exports them), so an edge from a
/// file to a file of its own submodules is not counted; every other one is.
pub(super) fn file_graph(
    files: &BTreeMap<ModPath, (String, String)>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (own, (name, text)) in files {
        let code = code_only(text);
        let mut used = BTreeSet::new();
        for (_, path) in paths(&code, own) {
            let target = (0..=path.len())
                .rev()
                .find_map(|k| files.get_key_value(&path[..k]));
            if let Some((module, (file, _))) = target {
                let part_of_own = module.len() > own.len() && module.starts_with(own);
                if module != own && !part_of_own {
                    used.insert(file.clone());
                }
            }
        }
        graph.insert(name.clone(), used);
    }
    graph
}

/// A circle in `graph`, as the files along it (the first repeated at the end), if any.
pub(super) fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_string(), Mark::Open);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match marks.get(next) {
                Some(Mark::Open) => {
                    let from = stack.iter().position(|n| n == next).unwrap_or(0);
                    let mut found = stack[from..].to_vec();
                    found.push(next.clone());
                    return Some(found);
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(found) = visit(next, graph, marks, stack) {
                        return Some(found);
                    }
                }
            }
        }
        stack.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if !marks.contains_key(node) {
            let mut stack = Vec::new();
            if let Some(found) = visit(node, graph, &mut marks, &mut stack) {
                return Some(found);
            }
        }
    }
    None
}
