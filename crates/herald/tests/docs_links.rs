//! The documentation's links resolve: every relative link and `#anchor` in README.md, docs/**/*.md
//! and deploy/**/README.md names a file that exists and, for a Markdown target, a heading it has
//! (GitHub's heading slugs, as github-slugger computes them); every page of docs/ is in the book's
//! SUMMARY.md; and the README's sizing block is the sizing page's. A failure names the file, the
//! line and the link.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Markdown files under `dir` (recursively), relative to the workspace root; `only` keeps files of
/// that name.
fn markdown_under(dir: &Path, only: Option<&str>, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let path = e.expect("a directory entry").path();
        if path.is_dir() {
            markdown_under(&path, only, out);
        } else if path.extension().is_some_and(|x| x == "md")
            && only.is_none_or(|n| path.file_name().is_some_and(|f| f == n))
        {
            out.push(path);
        }
    }
}

/// The files whose links are checked.
fn checked_files() -> Vec<PathBuf> {
    let root = root();
    let mut out = vec![root.join("README.md")];
    markdown_under(&root.join("docs"), None, &mut out);
    markdown_under(&root.join("deploy"), Some("README.md"), &mut out);
    out.sort();
    out
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        match fence {
            Some(f) if t.starts_with(f) => fence = None,
            Some(_) => {}
            None if t.starts_with("```") || t.starts_with("~~~") => fence = Some(&t[..3]),
            None => out.push((i + 1, line)),
        }
    }
    out
}

/// `line` with its inline code spans removed (links inside backticks are not links).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline links `[text](target)` of one line.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let mut depth = 0usize;
        let mut end = None;
        for (i, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(i);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let Some(end) = end else { break };
        // A title after the target: `(path "title")`.
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    out
}

/// GitHub's anchor for a heading's text: lower case, markup and punctuation dropped (letters,
/// marks, digits, `-` and `_` kept), each space a `-` (github-slugger's rules).
fn slug(heading: &str) -> String {
    // The heading as GitHub renders it: link text without its target, no emphasis or code marks.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings, GitHub's `-1`, `-2` suffixes for repeats included.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let t = line.trim_start();
        let hashes = t.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !t[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&t[hashes..]);
        let mut candidate = base.clone();
        let mut n = 0;
        while out.contains(&candidate) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
        out.insert(candidate);
    }
    out
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// One broken link, as `file:line: link: why`.
fn check_link(file: &Path, line: usize, target: &str) -> Option<String> {
    if target.is_empty()
        || target.contains("://")
        || target.starts_with("mailto:")
        || target.starts_with('{')
    {
        return None;
    }
    let (path_part, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let dest = if path_part.is_empty() {
        file.to_path_buf()
    } else {
        file.parent().expect("a parent").join(path_part)
    };
    let here = format!("{}:{line}: {target}", relative(file));
    if !dest.exists() {
        return Some(format!("{here}: {} does not exist", relative(&dest)));
    }
    let anchor = anchor?;
    if dest.is_dir() || dest.extension().is_none_or(|x| x != "md") {
        return Some(format!(
            "{here}: an anchor into a file that is not Markdown"
        ));
    }
    let text = std::fs::read_to_string(&dest).expect("the target reads");
    if anchors(&text).contains(anchor) {
        None
    } else {
        Some(format!(
            "{here}: {} has no heading with anchor #{anchor}",
            relative(&dest)
        ))
    }
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug(" Sizing"), "sizing");
    assert_eq!(
        slug(" 2. Control-plane load, direct versus through herald"),
        "2-control-plane-load-direct-versus-through-herald"
    );
    assert_eq!(
        slug(" Protobuf on the face (issue 21) — `bench/protobuf-lists.sh`, `x --protobuf`"),
        "protobuf-on-the-face-issue-21--benchprotobuf-listssh-x---protobuf"
    );
    assert_eq!(
        slug(" herald explain: why is (or isn't) my target scraped?"),
        "herald-explain-why-is-or-isnt-my-target-scraped"
    );
    assert_eq!(slug(" See [the book](docs/x.md) now"), "see-the-book-now");
    let a = anchors("# A\n\n## A\n```\n# not a heading\n```\n## A\n");
    assert_eq!(
        a,
        ["a", "a-1", "a-2"].map(String::from).into_iter().collect()
    );
}

#[test]
fn links_are_found_outside_code() {
    assert_eq!(
        link_targets("see [a](x.md#y) and `[b](no.md)` and [c](<z.md> \"t\")"),
        ["x.md#y", "z.md"]
    );
    let text = "x [a](a.md)\n```\n[b](b.md)\n```\n[c](c.md)\n";
    let found: Vec<_> = prose_lines(text)
        .into_iter()
        .flat_map(|(n, l)| link_targets(l).into_iter().map(move |t| (n, t)))
        .collect();
    assert_eq!(found, [(1, "a.md".to_string()), (5, "c.md".to_string())]);
}

#[test]
fn a_broken_link_is_named_with_its_file_and_line() {
    let readme = root().join("README.md");
    let missing = check_link(&readme, 7, "docs/no-such-page.md").expect("reported");
    assert!(
        missing.starts_with("README.md:7: docs/no-such-page.md: "),
        "{missing}"
    );
    let anchor = check_link(&readme, 9, "docs/install.md#no-such-heading").expect("reported");
    assert!(
        anchor.contains("has no heading with anchor #no-such-heading"),
        "{anchor}"
    );
    assert_eq!(check_link(&readme, 1, "docs/install.md#helm"), None);
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let files = checked_files();
    assert!(files.len() > 10, "the docs are found: {files:?}");
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                checked += 1;
                broken.extend(check_link(file, n, &target));
            }
        }
    }
    assert!(checked > 50, "links were found ({checked})");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let docs = root().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).expect("docs/SUMMARY.md");
    let listed: BTreeSet<PathBuf> = prose_lines(&summary)
        .into_iter()
        .flat_map(|(_, l)| link_targets(l))
        .map(|t| docs.join(t))
        .collect();
    let mut pages = Vec::new();
    markdown_under(&docs, None, &mut pages);
    let missing: Vec<String> = pages
        .iter()
        .filter(|p| !p.ends_with("SUMMARY.md") && !listed.contains(*p))
        .map(|p| relative(p))
        .collect();
    assert!(
        missing.is_empty(),
        "pages the book leaves out (add them to docs/SUMMARY.md): {missing:?}"
    );
}

#[test]
fn the_readmes_sizing_block_is_the_sizing_pages() {
    let block = |path: &str, heading: &str| -> String {
        let text = std::fs::read_to_string(root().join(path)).expect("readable");
        text.split(heading)
            .nth(1)
            .and_then(|s| s.split("```").nth(1))
            .unwrap_or_else(|| panic!("{path}: a code block after {heading:?}"))
            .to_string()
    };
    assert_eq!(
        block("README.md", "### Sizing"),
        block("docs/sizing.md", "## The formula"),
        "README.md's sizing formula and docs/sizing.md's differ"
    );
}
