//! What the documentation tests share: the repository's root, the fenced blocks of its Markdown
//! pages (with the HTML comment that marks a block), a block found by the line before it, the
//! scripts made of a page's blocks, and child processes killed at the end of a test.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::Child;

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fenced block: where it starts, its info string, the HTML comment just before it, its text.
#[derive(Debug, Clone)]
pub struct Block {
    pub file: String,
    pub line: usize,
    pub lang: String,
    pub marker: Option<String>,
    pub text: String,
}

impl Block {
    /// Whether the comment before the block contains `word`.
    pub fn marked(&self, word: &str) -> bool {
        self.marker.as_deref().is_some_and(|m| m.contains(word))
    }
}

/// The fenced blocks of `text` (the page `file`), in order.
pub fn blocks_of(file: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        if let Some(info) = t.strip_prefix("```") {
            let start = i;
            let marker = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim())
                .filter(|l| l.starts_with("<!--"))
                .map(String::from);
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                body.push(lines[i]);
                i += 1;
            }
            out.push(Block {
                file: file.to_string(),
                line: start + 1,
                lang: info.split_whitespace().next().unwrap_or("").to_string(),
                marker,
                text: body.join("\n") + "\n",
            });
        }
        i += 1;
    }
    out
}

/// The blocks of one page, `file` relative to the root.
pub fn page_blocks(file: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    blocks_of(file, &text)
}

fn markdown_under(dir: &Path, only: Option<&str>, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let path = e.expect("an entry").path();
        if path.is_dir() {
            markdown_under(&path, only, out);
        } else if path.extension().is_some_and(|x| x == "md")
            && only.is_none_or(|n| path.file_name().is_some_and(|f| f == n))
        {
            out.push(path);
        }
    }
}

/// Every block of the README, the book and the deploy READMEs.
pub fn all_blocks() -> Vec<Block> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    markdown_under(&root.join("docs"), None, &mut files);
    markdown_under(&root.join("deploy"), Some("README.md"), &mut files);
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            let rel = f
                .strip_prefix(&root)
                .expect("under root")
                .display()
                .to_string();
            blocks_of(&rel, &std::fs::read_to_string(f).expect("readable"))
        })
        .collect()
}

pub fn is_shell(b: &Block) -> bool {
    matches!(b.lang.as_str(), "sh" | "bash" | "shell" | "console")
}

/// The text of the first fenced block of `file` after a line containing `marker`.
pub fn block_after(file: &str, marker: &str) -> String {
    let text = std::fs::read_to_string(root().join(file)).expect("readable");
    let (before, _) = text
        .split_once(marker)
        .unwrap_or_else(|| panic!("{file}: {marker:?}"));
    let from = before.lines().count();
    blocks_of(file, &text)
        .into_iter()
        .find(|b| b.line > from)
        .unwrap_or_else(|| panic!("{file}: a fenced block after {marker:?}"))
        .text
}

/// The page's shell blocks as one script, each block introduced by an `echo` of where it is, so a
/// failure names the block.
pub fn page_script(blocks: &[Block]) -> String {
    blocks
        .iter()
        .filter(|b| is_shell(b))
        .map(|b| format!("echo '>>> {}:{}' >&2\n{}", b.file, b.line, b.text))
        .collect()
}

/// The file a YAML block says it is, by its first line (`# prometheus.yml`), if any.
pub fn file_name_of(b: &Block) -> Option<&str> {
    let first = b.text.lines().next()?.strip_prefix("# ")?.trim();
    (!first.is_empty() && !first.contains(' ')).then_some(first)
}

/// Blocks as a reader copies them, as one script: shell blocks as they are, a YAML block that
/// names its file (`# prometheus.yml`) written to that file. Panics on any other block.
pub fn copy_script(blocks: &[Block]) -> String {
    let mut out = String::new();
    for b in blocks {
        out.push_str(&format!("echo '>>> {}:{}' >&2\n", b.file, b.line));
        if is_shell(b) {
            out.push_str(&b.text);
        } else if let Some(name) = file_name_of(b) {
            assert!(
                !b.text.lines().any(|l| l == "HERALD_DOC_EOF"),
                "{}:{}",
                b.file,
                b.line
            );
            out.push_str(&format!(
                "cat > {name} <<'HERALD_DOC_EOF'\n{}HERALD_DOC_EOF\n",
                b.text
            ));
        } else {
            panic!(
                "{}:{}: a {} block that names no file cannot be copied",
                b.file, b.line, b.lang
            );
        }
    }
    out
}

/// A child process killed at the end of a test.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}
