//! The crates' import graph, read from their sources: no import circle may span more than one file
//! in herald-server or the discovery engine (a circle between files is a room that cannot be read,
//! tested or moved on its own; see crates/herald-server/ARCHITECTURE.md).
//!
//! The graph is read as text, not by the compiler: every `use` tree and every path that starts at
//! `crate::`, `super::`, `self::` or a child module the file declares (`mod x;` then `x::…`) is an
//! arrow from the file to the file that defines the module it names. Test code (`#[cfg(test)]`
//! items and the files they declare) is left out: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose files are held to the rule, relative to this crate's manifest.
const CRATES: &[&str] = &[".", "../herald-index"];

/// Circles still open, as the sets of files (relative to the crate's `src/`) they span. The test
/// fails when a circle is found that is not listed (a new one, or a listed one grown) and when a
/// listed circle no longer exists (then shrink this list). Empty, and to be kept so.
const KNOWN_CIRCLES: &[(&str, &[&str])] = &[];

#[test]
fn no_import_circle_spans_more_than_one_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found: Vec<(String, BTreeSet<String>)> = Vec::new();
    for krate in CRATES {
        let src = root.join(krate).join("src");
        if !src.join("lib.rs").exists() {
            continue;
        }
        let name = crate_name(&root.join(krate));
        let graph = Graph::read(&src);
        assert!(
            graph.files.len() > 1,
            "{name}: read {} files: the module tree was not followed",
            graph.files.len()
        );
        for circle in graph.circles() {
            found.push((name.clone(), circle));
        }
    }
    let known: Vec<(String, BTreeSet<String>)> = KNOWN_CIRCLES
        .iter()
        .map(|(k, files)| (k.to_string(), files.iter().map(|f| f.to_string()).collect()))
        .collect();
    let new: Vec<_> = found.iter().filter(|c| !known.contains(c)).collect();
    let gone: Vec<_> = known.iter().filter(|c| !found.contains(c)).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "import circles spanning more than one file:\n{}\nlisted in KNOWN_CIRCLES but no longer found \
         (shrink the list):\n{}",
        describe(&new),
        describe(&gone),
    );
}

#[test]
fn a_circle_between_two_files_is_found() {
    let dir = tempdir();
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    let write = |file: &str, text: &str| std::fs::write(src.join(file), text).unwrap();
    write(
        "lib.rs",
        "pub mod a;\npub mod b;\npub mod c;\npub mod d;\npub use a::A;\n",
    );
    // a -> b through a use tree, b -> a through the root's re-export; the child `inner` -> b.
    write(
        "a.rs",
        "mod inner;\nuse crate::{b::B, c};\n/// crate::d::Nothing in a comment\npub struct A;\n",
    );
    write("a/inner.rs", "use super::super::b;\n");
    write("b.rs", "pub struct B(crate::A);\n");
    // c -> d and d -> c only through renamed imports; c -> a only in tests and a string.
    write(
        "c.rs",
        "use crate::d::{self as dee};\npub struct C;\nfn g() { dee::f(); }\n\
         const S: &str = \"crate::a::A\";\n#[cfg(test)]\nmod tests { use crate::a::A; }\n",
    );
    write(
        "d.rs",
        "use crate::c as see;\npub fn f() { let _ = see::C; }\n",
    );
    let graph = Graph::read(&src);
    let circles = graph.circles();
    std::fs::remove_dir_all(&dir).unwrap();
    let set = |files: &[&str]| {
        files
            .iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<String>>()
    };
    assert_eq!(
        circles,
        vec![set(&["a.rs", "b.rs"]), set(&["c.rs", "d.rs"])],
        "edges: {:?}",
        graph.edges
    );
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("herald-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn crate_name(dir: &Path) -> String {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("a crate has a manifest");
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("name = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("the manifest names the crate")
        .to_string()
}

fn describe(circles: &[&(String, BTreeSet<String>)]) -> String {
    if circles.is_empty() {
        return "  (none)".to_string();
    }
    circles
        .iter()
        .map(|(k, files)| {
            let files: Vec<&str> = files.iter().map(String::as_str).collect();
            format!("  {k}: {}", files.join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The files of one crate (by path relative to `src/`) and the arrows between them.
struct Graph {
    /// Module path (`["http", "sd"]`) to file.
    modules: BTreeMap<Vec<String>, String>,
    files: Vec<String>,
    edges: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    fn read(src: &Path) -> Graph {
        let mut modules = BTreeMap::new();
        let mut texts = BTreeMap::new();
        let mut todo = vec![(Vec::<String>::new(), src.join("lib.rs"))];
        while let Some((path, file)) = todo.pop() {
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let tokens = strip_test_items(tokenize(&text));
            // A file's children live in the folder named after it (`foo.rs` next to `foo/`), or in
            // its own folder for `lib.rs` and `mod.rs`.
            let stem = file
                .file_stem()
                .expect("a file")
                .to_string_lossy()
                .to_string();
            let dir = if stem == "lib" || stem == "mod" {
                file.parent().expect("a folder").to_path_buf()
            } else {
                file.with_extension("")
            };
            for child in declared_modules(&tokens) {
                let flat = dir.join(format!("{child}.rs"));
                let nested = dir.join(&child).join("mod.rs");
                let at = if flat.exists() { flat } else { nested };
                let mut p = path.clone();
                p.push(child);
                todo.push((p, at));
            }
            let rel = file
                .strip_prefix(src)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            modules.insert(path.clone(), rel.clone());
            texts.insert(rel, (path, tokens));
        }
        let mut graph = Graph {
            files: texts.keys().cloned().collect(),
            modules,
            edges: BTreeMap::new(),
        };
        let lib_exports = texts
            .get("lib.rs")
            .map(|(_, t)| reexports(t))
            .unwrap_or_default();
        for (file, (path, tokens)) in &texts {
            let children: BTreeSet<String> = declared_modules(tokens).into_iter().collect();
            let imported: BTreeMap<String, Vec<String>> = uses(tokens)
                .into_iter()
                .filter_map(|(name, p)| {
                    Some((name, absolute(path, &children, &BTreeMap::new(), &p)?))
                })
                .collect();
            for used in paths(tokens) {
                let Some(absolute) = absolute(path, &children, &imported, &used) else {
                    continue;
                };
                if let Some(target) = graph.resolve(&absolute, &lib_exports)
                    && &target != file
                {
                    graph.edges.entry(file.clone()).or_default().insert(target);
                }
            }
        }
        graph
    }

    /// The file that defines the deepest module `path` names; a name re-exported at the crate's root
    /// is followed to where it comes from.
    fn resolve(
        &self,
        path: &[String],
        lib_exports: &BTreeMap<String, Vec<String>>,
    ) -> Option<String> {
        if path.len() == 1
            && !self.modules.contains_key(path)
            && let Some(source) = lib_exports.get(&path[0])
        {
            return self.resolve(source, &BTreeMap::new());
        }
        (1..=path.len())
            .rev()
            .find_map(|n| self.modules.get(&path[..n]).cloned())
            .filter(|f| f != "lib.rs" || path.is_empty())
    }

    /// Strongly connected components of more than one file (Tarjan's algorithm).
    fn circles(&self) -> Vec<BTreeSet<String>> {
        struct Walk<'g> {
            graph: &'g Graph,
            index: BTreeMap<&'g str, usize>,
            low: BTreeMap<&'g str, usize>,
            stack: Vec<&'g str>,
            on_stack: BTreeSet<&'g str>,
            next: usize,
            found: Vec<BTreeSet<String>>,
        }
        impl<'g> Walk<'g> {
            fn visit(&mut self, v: &'g str) {
                self.index.insert(v, self.next);
                self.low.insert(v, self.next);
                self.next += 1;
                self.stack.push(v);
                self.on_stack.insert(v);
                for w in self.graph.edges.get(v).into_iter().flatten() {
                    let w = w.as_str();
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let low = self.low[v].min(self.low[w]);
                        self.low.insert(v, low);
                    } else if self.on_stack.contains(w) {
                        let low = self.low[v].min(self.index[w]);
                        self.low.insert(v, low);
                    }
                }
                if self.low[v] == self.index[v] {
                    let mut component = BTreeSet::new();
                    while let Some(w) = self.stack.pop() {
                        self.on_stack.remove(w);
                        component.insert(w.to_string());
                        if w == v {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        self.found.push(component);
                    }
                }
            }
        }
        let mut walk = Walk {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            next: 0,
            found: Vec::new(),
        };
        for f in &self.files {
            if !walk.index.contains_key(f.as_str()) {
                walk.visit(f);
            }
        }
        walk.found.sort();
        walk.found
    }
}

/// `path` (as written in the module at `at`, which declares `children` and imports `imported`) made
/// absolute; `None` for a path into another crate.
fn absolute(
    at: &[String],
    children: &BTreeSet<String>,
    imported: &BTreeMap<String, Vec<String>>,
    path: &[String],
) -> Option<Vec<String>> {
    let mut base: Vec<String> = at.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        Some("self") => rest = &rest[1..],
        Some(first) if children.contains(first) => {}
        Some(first) if imported.contains_key(first) => {
            base.clone_from(&imported[first]);
            rest = &rest[1..];
        }
        _ => return None,
    }
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(base)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Punct(char),
    /// `::`
    Path,
}

/// Identifiers and punctuation, with comments, strings and character literals left out.
fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' || ((c == 'r' || c == 'b') && raw_string_at(&chars, i).is_some()) {
            i = skip_string(&chars, i);
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == ':' && next == Some(':') {
            out.push(Token::Path);
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(Token::Punct(c));
            }
            i += 1;
        }
    }
    out
}

/// The number of `#` of a raw string (`r"`, `r#"`, `br"`) starting at `i`.
fn raw_string_at(chars: &[char], i: usize) -> Option<usize> {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if chars[j] == 'b' {
        j += 1;
        if chars.get(j) == Some(&'"') {
            return Some(usize::MAX); // b"…": an ordinary string.
        }
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some(hashes)
}

fn skip_string(chars: &[char], mut i: usize) -> usize {
    match raw_string_at(chars, i) {
        Some(hashes) if hashes != usize::MAX => {
            while chars[i] != '"' {
                i += 1;
            }
            i += 1;
            loop {
                if i >= chars.len() {
                    return i;
                }
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    return i + 1 + hashes;
                }
                i += 1;
            }
        }
        _ => {
            while chars[i] != '"' {
                i += 1;
            }
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i + 1
        }
    }
}

/// The tokens without the items marked `#[cfg(test)]`.
fn strip_test_items(tokens: Vec<Token>) -> Vec<Token> {
    let marker = [
        Token::Punct('#'),
        Token::Punct('['),
        Token::Ident("cfg".into()),
        Token::Punct('('),
        Token::Ident("test".into()),
        Token::Punct(')'),
        Token::Punct(']'),
    ];
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i..].starts_with(&marker) {
            i += marker.len();
            // The item ends at its first `;` or at the brace that closes its first `{`.
            let mut depth = 0usize;
            while i < tokens.len() {
                match tokens[i] {
                    Token::Punct('{') => depth += 1,
                    Token::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    Token::Punct(';') if depth == 0 => {
                        i += 1;
                        break;
                    }
                    _ => {}
                }
                i += 1;
            }
        } else {
            out.push(tokens[i].clone());
            i += 1;
        }
    }
    out
}

/// The modules a file declares in files of their own (`mod name;`).
fn declared_modules(tokens: &[Token]) -> Vec<String> {
    tokens
        .windows(3)
        .filter_map(|w| match w {
            [Token::Ident(m), Token::Ident(name), Token::Punct(';')] if m == "mod" => {
                Some(name.clone())
            }
            _ => None,
        })
        .collect()
}

/// Every path in the file (use trees expanded), as its segments.
fn paths(tokens: &[Token]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let starts = matches!(&tokens[i], Token::Ident(_))
            && tokens.get(i + 1) == Some(&Token::Path)
            && (i == 0 || tokens[i - 1] != Token::Path);
        if starts {
            i = tree(tokens, i, Vec::new(), &mut out);
        } else {
            i += 1;
        }
    }
    out.into_iter().map(|leaf| leaf.path).collect()
}

/// One leaf of a use tree: the path it names and the name it is imported as, when renamed.
struct Leaf {
    path: Vec<String>,
    alias: Option<String>,
}

/// Reads the path or use tree at `i` (after `prefix`), pushing every leaf; returns where it ends.
fn tree(tokens: &[Token], mut i: usize, mut prefix: Vec<String>, out: &mut Vec<Leaf>) -> usize {
    let leaf = |path| Leaf { path, alias: None };
    loop {
        match tokens.get(i) {
            Some(Token::Ident(s)) => {
                prefix.push(s.clone());
                i += 1;
                if tokens.get(i) == Some(&Token::Path) {
                    i += 1;
                } else {
                    out.push(leaf(prefix));
                    return i;
                }
            }
            Some(Token::Punct('{')) => {
                i += 1;
                loop {
                    match tokens.get(i) {
                        Some(Token::Punct('}')) => return i + 1,
                        Some(Token::Punct(',')) => i += 1,
                        Some(Token::Ident(a)) if a == "as" => {
                            if let (Some(last), Some(Token::Ident(name))) =
                                (out.last_mut(), tokens.get(i + 1))
                            {
                                last.alias = Some(name.clone());
                            }
                            i += 2;
                        }
                        Some(Token::Punct('*')) => {
                            out.push(leaf(prefix.clone()));
                            i += 1;
                        }
                        None => return i,
                        _ => i = tree(tokens, i, prefix.clone(), out),
                    }
                }
            }
            Some(Token::Punct('*')) => {
                out.push(leaf(prefix));
                return i + 1;
            }
            _ => {
                if !prefix.is_empty() {
                    out.push(leaf(prefix));
                }
                return i;
            }
        }
    }
}

/// What the file's `use` items bring into scope: each name (an alias, or the last segment; the
/// module itself for `self`) to the path it names, as written. Glob imports bring no name.
fn uses(tokens: &[Token]) -> Vec<(String, Vec<String>)> {
    let mut named = Vec::new();
    let mut i = 0;
    while i + 1 < tokens.len() {
        if tokens[i] != Token::Ident("use".into()) {
            i += 1;
            continue;
        }
        let mut leaves = Vec::new();
        let end = tree(tokens, i + 1, Vec::new(), &mut leaves);
        if let (Some(Token::Ident(a)), Some(Token::Ident(y)), Some(last)) =
            (tokens.get(end), tokens.get(end + 1), leaves.last_mut())
            && a == "as"
        {
            last.alias = Some(y.clone());
        }
        for mut leaf in leaves {
            if leaf.path.last().map(String::as_str) == Some("self") {
                leaf.path.pop();
            }
            let name = leaf.alias.or_else(|| leaf.path.last().cloned());
            if let Some(name) = name.filter(|n| n != "_") {
                named.push((name, leaf.path));
            }
        }
        i = end;
    }
    named
}

/// What the crate root re-exports: each name (or alias) to the path it names.
fn reexports(tokens: &[Token]) -> BTreeMap<String, Vec<String>> {
    uses(tokens).into_iter().collect()
}
