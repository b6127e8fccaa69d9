//! Server-side sharded list and watch (KEP-5866, `ShardedListAndWatch`, alpha in 1.36): the
//! `shardSelector` query parameter, its hash and half-open ranges, and the selector echoed back in
//! `metadata.shardInfo`.
//!
//! Reimplements the upstream at kubernetes/kubernetes (staging, mirrored as kubernetes/apiserver
//! commit 24a394e516bfda066d7e2221d7d92c052de27c54 and the k8s.io/apimachinery v0.37.2 module; the
//! feature landed in bf32439353f0332bfaddd24cc9f87543717ad6f8 and c7dae5a3412d3bf0983517c0cd6755e33a106eaf):
//! - `k8s.io/apiserver/pkg/sharding/parser.go` `Parse`: the selector is a CEL expression that is parsed
//!   (cel-go, no macros) but never evaluated; its AST must be `shardRange(field, 'start', 'end')` calls
//!   joined by `||`, all on the same field. Its error texts are reproduced here word for word.
//! - `k8s.io/apimachinery/pkg/sharding/hash.go` `HashField`: 64-bit FNV-1a of the field's value;
//!   `selector.go` `Matches`: `start <= hash < end` for any range, the bounds compared as 16-digit
//!   hex strings (or `0x10000000000000000`, 2^64); `String`: the canonical form echoed in `shardInfo`.
//! - `accessor.go` `ResolveFieldValue`: `object.metadata.uid` or `object.metadata.namespace`.
//!
//! NB: the CEL grammar is parsed by hand, only as far as the upstream walker can tell expressions
//! apart (calls, operators, selects, literals, lists, maps): a full CEL crate would add an
//! interpreter and its dependencies for a parameter that is never evaluated. Syntax errors say
//! `CEL parse error: Syntax error: …` as upstream does, with this parser's own description after it
//! (cel-go's ANTLR messages are not reproduced).

use std::fmt;

use crate::log::Entry;

/// The field whose hash places an object in a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardKey {
    /// `object.metadata.uid`
    Uid,
    /// `object.metadata.namespace`
    Namespace,
}

impl ShardKey {
    fn path(self) -> &'static str {
        match self {
            ShardKey::Uid => "object.metadata.uid",
            ShardKey::Namespace => "object.metadata.namespace",
        }
    }
}

/// A parsed `shardSelector`: one or more half-open hash ranges on one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSelector {
    pub key: ShardKey,
    /// `[start, end)` in the 2^64 hash space; `end` may be 2^64.
    pub ranges: Vec<(u128, u128)>,
}

/// Why a selector was refused; `Display` is the upstream's error text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ShardError(pub String);

/// 64-bit FNV-1a, as Go's `hash/fnv` `New64a` (the upstream's `HashField`).
pub fn fnv1a64(data: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    data.iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

impl ShardSelector {
    /// Parses a `shardSelector` value as the apiserver does.
    pub fn parse(expr: &str) -> Result<ShardSelector, ShardError> {
        // Go's strings.TrimSpace trims Unicode white space.
        let expr = expr.trim();
        if expr.is_empty() {
            return Err(ShardError(
                "empty shard selector is not allowed; omit the parameter for unfiltered lists"
                    .into(),
            ));
        }
        let ast = Parser::new(expr)
            .parse_all()
            .map_err(|e| ShardError(format!("CEL parse error: Syntax error: {e}")))?;
        let mut reqs = Vec::new();
        walk(&ast, &mut reqs)?;
        let key = reqs[0].0;
        if let Some(other) = reqs.iter().find(|r| r.0 != key) {
            return Err(ShardError(format!(
                "all shard ranges must use the same field, got {:?} and {:?}",
                key.path(),
                other.0.path()
            )));
        }
        Ok(ShardSelector {
            key,
            ranges: reqs.into_iter().map(|r| (r.1, r.2)).collect(),
        })
    }

    /// Whether the object's field hashes into one of the ranges.
    pub fn matches(&self, e: &Entry) -> bool {
        let h = match self.key {
            ShardKey::Uid => e.uid_hash,
            ShardKey::Namespace => fnv1a64(e.namespace().as_bytes()),
        };
        self.contains(h)
    }

    /// Whether `hash` lies in one of the ranges.
    pub fn contains(&self, hash: u64) -> bool {
        let h = u128::from(hash);
        self.ranges.iter().any(|&(s, e)| s <= h && h < e)
    }
}

/// The canonical form the apiserver echoes in `shardInfo.selector` (upstream `shardSelector.String`).
impl fmt::Display for ShardSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (s, e)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(" || ")?;
            }
            write!(
                f,
                "shardRange({}, '{}', '{}')",
                self.key.path(),
                hex_bound(*s),
                hex_bound(*e)
            )?;
        }
        Ok(())
    }
}

fn hex_bound(v: u128) -> String {
    format!("0x{v:016x}")
}

/// The range `[start, end)` of shard `index` of `total` equal shards, the last one reaching 2^64 (as
/// the upstream's integration test `calculateShardRange` splits the space).
pub fn shard_range(index: u64, total: u64) -> (u128, u128) {
    let total = u128::from(total.max(1));
    let span = (1u128 << 64) / total;
    let start = span * u128::from(index);
    let end = if u128::from(index) + 1 >= total {
        1u128 << 64
    } else {
        span * (u128::from(index) + 1)
    };
    (start, end)
}

/// The selector text of shard `index` of `total` on `object.metadata.uid`.
pub fn shard_selector_text(index: u64, total: u64) -> String {
    let (start, end) = shard_range(index, total);
    ShardSelector {
        key: ShardKey::Uid,
        ranges: vec![(start, end)],
    }
    .to_string()
}

// ---- the CEL subset -------------------------------------------------------------------------------

/// A CEL expression, as far as the upstream's walker tells kinds apart. Kind numbers are cel-go's
/// `ast.ExprKind` values, which its messages print with `%v`.
#[derive(Debug, Clone, PartialEq)]
enum Expr {
    /// A function or operator call (`_||_`, `_&&_`, `shardRange`, …); `target` for `x.f(…)`.
    Call {
        function: String,
        target: Option<Box<Expr>>,
        args: Vec<Expr>,
    },
    Ident(String),
    List,
    Literal(Lit),
    Map,
    Select(Box<Expr>, String),
    Struct,
}

impl Expr {
    fn kind(&self) -> u8 {
        match self {
            Expr::Call { .. } => 1,
            Expr::Ident(_) => 3,
            Expr::List => 4,
            Expr::Literal(_) => 5,
            Expr::Map => 6,
            Expr::Select(..) => 7,
            Expr::Struct => 8,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Lit {
    Str(String),
    Int,
    Uint,
    Double,
    Bool,
    Null,
    Bytes,
}

impl Lit {
    /// Go's `%T` of cel-go's literal `Value()`.
    fn go_type(&self) -> &'static str {
        match self {
            Lit::Str(_) => "string",
            Lit::Int => "int64",
            Lit::Uint => "uint64",
            Lit::Double => "float64",
            Lit::Bool => "bool",
            Lit::Null => "structpb.NullValue",
            Lit::Bytes => "[]uint8",
        }
    }
}

type Req = (ShardKey, u128, u128);

fn walk(e: &Expr, out: &mut Vec<Req>) -> Result<(), ShardError> {
    let Expr::Call { function, args, .. } = e else {
        return Err(ShardError(format!(
            "unexpected expression kind {}; expected shardRange() call or || operator",
            e.kind()
        )));
    };
    match function.as_str() {
        "_||_" => {
            for a in args {
                walk(a, out)?;
            }
            Ok(())
        }
        "shardRange" => {
            out.push(shard_range_call(args)?);
            Ok(())
        }
        f => Err(ShardError(format!(
            "unsupported function {f:?}; only shardRange() and || are allowed"
        ))),
    }
}

fn shard_range_call(args: &[Expr]) -> Result<Req, ShardError> {
    if args.len() != 3 {
        return Err(ShardError(format!(
            "shardRange() requires exactly 3 arguments, got {}",
            args.len()
        )));
    }
    let path = field_path(&args[0])
        .map_err(|e| ShardError(format!("shardRange() first argument: {e}")))?;
    let key = match path.as_str() {
        "object.metadata.uid" => ShardKey::Uid,
        "object.metadata.namespace" => ShardKey::Namespace,
        _ => {
            return Err(ShardError(format!(
                "unsupported field path {path:?}; supported: object.metadata.uid, object.metadata.namespace"
            )));
        }
    };
    let start = hex_literal(&args[1], "hexStart")?;
    let end = hex_literal(&args[2], "hexEnd")?;
    if start >= end {
        return Err(ShardError(format!(
            "shard range start {} must be less than end {}",
            hex_bound(start),
            hex_bound(end)
        )));
    }
    Ok((key, start, end))
}

fn field_path(e: &Expr) -> Result<String, String> {
    match e {
        Expr::Ident(i) => Ok(i.clone()),
        Expr::Select(operand, field) => Ok(format!("{}.{field}", field_path(operand)?)),
        e => Err(format!(
            "expected field path (e.g. object.metadata.uid), got expression kind {}",
            e.kind()
        )),
    }
}

fn hex_literal(e: &Expr, name: &str) -> Result<u128, ShardError> {
    let err = |m: String| Err(ShardError(m));
    let Expr::Literal(lit) = e else {
        return err(format!(
            "{name} must be a string literal (e.g. '0xff'), got expression kind {}",
            e.kind()
        ));
    };
    let Lit::Str(s) = lit else {
        return err(format!(
            "{name} must be a string literal, got {}",
            lit.go_type()
        ));
    };
    let Some(hex) = s.strip_prefix("0x") else {
        return err(format!("{name} must have '0x' prefix, got {s:?}"));
    };
    if hex.is_empty() {
        return err(format!("{name}: hex value is required after '0x'"));
    }
    // NB: Go's len counts bytes.
    if hex.len() > 17 {
        return err(format!(
            "{name}: hex value too long ({} chars, max 17): {hex:?}",
            hex.len()
        ));
    }
    if let Some(c) = hex
        .chars()
        .find(|c| !c.is_ascii_digit() && !('a'..='f').contains(c))
    {
        return err(format!(
            "{name}: invalid hex character {:?} in {s:?}",
            c.to_string()
        ));
    }
    if hex.len() == 17 {
        if s != "0x10000000000000000" {
            return err(format!(
                "{name}: 17-digit hex value must be '0x10000000000000000' (2^64), got {s:?}"
            ));
        }
    } else if hex.len() != 16 {
        let padded = format!("0x{}{hex}", "0".repeat(16 - hex.len()));
        return err(format!(
            "{name} must be a 0x-prefixed 16-digit hex value, got {s:?} (did you mean {padded:?}?)"
        ));
    }
    Ok(u128::from_str_radix(hex, 16).expect("checked: 16 or 17 lowercase hex digits"))
}

/// A recursive-descent parser of CEL's grammar (cel-spec `langdef.md`): conditional, `||`, `&&`,
/// relations, `+ -`, `* / %`, unary `! -`, member access, calls, index, and primaries.
struct Parser<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
}

/// Nesting beyond this is refused (cel-go refuses at its own recursion limit too) so a hostile
/// query string cannot exhaust the stack.
const MAX_DEPTH: usize = 100;

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Self {
        Parser {
            src,
            pos: 0,
            depth: 0,
        }
    }

    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn skip_ws(&mut self) {
        loop {
            let r = self.rest();
            let t = r.trim_start_matches([' ', '\t', '\n', '\r', '\x0c']);
            self.pos += r.len() - t.len();
            if t.starts_with("//") {
                self.pos += t.find('\n').unwrap_or(t.len());
            } else {
                return;
            }
        }
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(tok) {
            self.pos += tok.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, tok: &str) -> Result<(), String> {
        if self.eat(tok) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("expecting '{tok}'")))
        }
    }

    fn unexpected(&mut self, what: &str) -> String {
        self.skip_ws();
        let near = match self.rest().chars().next() {
            None => "<EOF>".to_string(),
            Some(c) => format!("'{c}'"),
        };
        format!("unexpected {near} at offset {}, {what}", self.pos)
    }

    fn parse_all(mut self) -> Result<Expr, String> {
        let e = self.expr()?;
        self.skip_ws();
        if !self.rest().is_empty() {
            return Err(self.unexpected("expecting end of input"));
        }
        Ok(e)
    }

    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, String>) -> Result<T, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "expression nested deeper than {MAX_DEPTH} levels at offset {}",
                self.pos
            ));
        }
        let r = f(self);
        self.depth -= 1;
        r
    }

    fn call(function: &str, args: Vec<Expr>) -> Expr {
        Expr::Call {
            function: function.into(),
            target: None,
            args,
        }
    }

    fn expr(&mut self) -> Result<Expr, String> {
        self.nested(|p| {
            let cond = p.or()?;
            if p.eat("?") {
                let a = p.or()?;
                p.expect(":")?;
                let b = p.expr()?;
                return Ok(Self::call("_?_:_", vec![cond, a, b]));
            }
            Ok(cond)
        })
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut terms = vec![self.and()?];
        while self.eat("||") {
            terms.push(self.and()?);
        }
        Ok(balance("_||_", terms))
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut terms = vec![self.relation()?];
        while self.eat("&&") {
            terms.push(self.relation()?);
        }
        Ok(balance("_&&_", terms))
    }

    fn relation(&mut self) -> Result<Expr, String> {
        let mut lhs = self.addition()?;
        loop {
            self.skip_ws();
            let op = ["<=", ">=", "==", "!=", "<", ">"]
                .into_iter()
                .find(|op| self.rest().starts_with(op))
                .map(|op| (op, format!("_{op}_")))
                .or_else(|| {
                    let r = self.rest();
                    (r.starts_with("in") && !r[2..].starts_with(is_ident_char))
                        .then(|| ("in", "@in".to_string()))
                });
            let Some((tok, name)) = op else {
                return Ok(lhs);
            };
            self.pos += tok.len();
            let rhs = self.addition()?;
            lhs = Self::call(&name, vec![lhs, rhs]);
        }
    }

    fn addition(&mut self) -> Result<Expr, String> {
        let mut lhs = self.multiplication()?;
        loop {
            let op = if self.eat("+") {
                "_+_"
            } else if self.eat("-") {
                "_-_"
            } else {
                return Ok(lhs);
            };
            let rhs = self.multiplication()?;
            lhs = Self::call(op, vec![lhs, rhs]);
        }
    }

    fn multiplication(&mut self) -> Result<Expr, String> {
        let mut lhs = self.unary()?;
        loop {
            let op = if self.eat("*") {
                "_*_"
            } else if self.eat("/") {
                "_/_"
            } else if self.eat("%") {
                "_%_"
            } else {
                return Ok(lhs);
            };
            let rhs = self.unary()?;
            lhs = Self::call(op, vec![lhs, rhs]);
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        self.nested(|p| {
            p.skip_ws();
            if p.rest().starts_with("!=") {
                return Err(p.unexpected("expecting an expression"));
            }
            if p.eat("!") {
                let e = p.unary()?;
                return Ok(Self::call("!_", vec![e]));
            }
            if p.eat("-") {
                // A negative number literal is one literal in CEL.
                p.skip_ws();
                if p.rest().starts_with(|c: char| c.is_ascii_digit()) {
                    return p.member_of_primary(true);
                }
                let e = p.unary()?;
                return Ok(Self::call("-_", vec![e]));
            }
            p.member_of_primary(false)
        })
    }

    fn member_of_primary(&mut self, negative: bool) -> Result<Expr, String> {
        let mut e = self.primary(negative)?;
        loop {
            if self.eat(".") {
                let name = self
                    .ident()
                    .ok_or_else(|| self.unexpected("expecting IDENTIFIER"))?;
                if self.eat("(") {
                    let args = self.args(")")?;
                    e = Expr::Call {
                        function: name,
                        target: Some(Box::new(e)),
                        args,
                    };
                } else if self.peek_struct_open() {
                    self.skip_struct_body()?;
                    e = Expr::Struct;
                } else {
                    e = Expr::Select(Box::new(e), name);
                }
            } else if self.eat("[") {
                let idx = self.expr()?;
                self.expect("]")?;
                e = Self::call("_[_]", vec![e, idx]);
            } else {
                return Ok(e);
            }
        }
    }

    fn peek_struct_open(&mut self) -> bool {
        self.skip_ws();
        self.rest().starts_with('{')
    }

    fn skip_struct_body(&mut self) -> Result<(), String> {
        self.expect("{")?;
        if self.eat("}") {
            return Ok(());
        }
        loop {
            self.ident()
                .ok_or_else(|| self.unexpected("expecting IDENTIFIER"))?;
            self.expect(":")?;
            self.expr()?;
            if self.eat("}") {
                return Ok(());
            }
            self.expect(",")?;
            if self.eat("}") {
                return Ok(());
            }
        }
    }

    fn args(&mut self, close: &str) -> Result<Vec<Expr>, String> {
        let mut out = Vec::new();
        if self.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(self.expr()?);
            if self.eat(close) {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }

    fn ident(&mut self) -> Option<String> {
        self.skip_ws();
        let r = self.rest();
        if !r.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            return None;
        }
        let n = r.find(|c: char| !is_ident_char(c)).unwrap_or(r.len());
        self.pos += n;
        Some(r[..n].to_string())
    }

    fn primary(&mut self, negative: bool) -> Result<Expr, String> {
        self.skip_ws();
        let r = self.rest();
        let c = r
            .chars()
            .next()
            .ok_or_else(|| self.unexpected("expecting an expression"))?;
        if c.is_ascii_digit() {
            return self.number(negative);
        }
        if c == '"' || c == '\'' {
            return Ok(Expr::Literal(Lit::Str(self.string(false)?)));
        }
        if c == '(' {
            self.pos += 1;
            let e = self.expr()?;
            self.expect(")")?;
            return Ok(e);
        }
        if c == '[' {
            self.pos += 1;
            self.args("]")?;
            return Ok(Expr::List);
        }
        if c == '{' {
            self.pos += 1;
            if !self.eat("}") {
                loop {
                    self.expr()?;
                    self.expect(":")?;
                    self.expr()?;
                    if self.eat("}") {
                        break;
                    }
                    self.expect(",")?;
                    if self.eat("}") {
                        break;
                    }
                }
            }
            return Ok(Expr::Map);
        }
        let leading_dot = self.eat(".");
        let Some(name) = self.ident() else {
            return Err(self.unexpected("expecting an expression"));
        };
        // String and bytes literals with prefixes: r'…', b'…', rb'…', br'…'.
        let lower = name.to_ascii_lowercase();
        if !leading_dot
            && matches!(lower.as_str(), "r" | "b" | "rb" | "br")
            && self.rest().starts_with(['"', '\''])
        {
            let raw = lower.contains('r');
            let s = self.string(raw)?;
            return Ok(Expr::Literal(if lower.contains('b') {
                Lit::Bytes
            } else {
                Lit::Str(s)
            }));
        }
        match name.as_str() {
            "true" | "false" if !leading_dot => return Ok(Expr::Literal(Lit::Bool)),
            "null" if !leading_dot => return Ok(Expr::Literal(Lit::Null)),
            _ => {}
        }
        let name = if leading_dot {
            format!(".{name}")
        } else {
            name
        };
        if self.eat("(") {
            let args = self.args(")")?;
            return Ok(Self::call(&name, args));
        }
        if self.peek_struct_open() {
            self.skip_struct_body()?;
            return Ok(Expr::Struct);
        }
        Ok(Expr::Ident(name))
    }

    fn number(&mut self, negative: bool) -> Result<Expr, String> {
        let r = self.rest();
        if let Some(hex) = r.strip_prefix("0x").or_else(|| r.strip_prefix("0X")) {
            let n = hex
                .find(|c: char| !c.is_ascii_hexdigit())
                .unwrap_or(hex.len());
            if n == 0 {
                return Err(self.unexpected("expecting hex digits"));
            }
            self.pos += 2 + n;
        } else {
            let n = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            self.pos += n;
            let r = self.rest();
            let mut double = false;
            if r.starts_with('.') && r[1..].starts_with(|c: char| c.is_ascii_digit()) {
                double = true;
                self.pos += 1;
                let r = self.rest();
                self.pos += r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            }
            let r = self.rest();
            if r.starts_with(['e', 'E']) {
                let exp = r[1..].trim_start_matches(['+', '-']);
                let digits = exp.find(|c: char| !c.is_ascii_digit()).unwrap_or(exp.len());
                if digits > 0 {
                    double = true;
                    self.pos += r.len() - exp.len() + digits;
                }
            }
            if double {
                return Ok(Expr::Literal(Lit::Double));
            }
        }
        if !negative && self.rest().starts_with(['u', 'U']) {
            self.pos += 1;
            return Ok(Expr::Literal(Lit::Uint));
        }
        Ok(Expr::Literal(Lit::Int))
    }

    /// A quoted string (single, double or triple quotes); escapes decoded unless raw.
    fn string(&mut self, raw: bool) -> Result<String, String> {
        let r = self.rest();
        let quote = if r.starts_with("'''") {
            "'''"
        } else if r.starts_with("\"\"\"") {
            "\"\"\""
        } else {
            &r[..1]
        };
        let start = self.pos;
        self.pos += quote.len();
        let mut out = String::new();
        loop {
            let r = self.rest();
            if r.starts_with(quote) {
                self.pos += quote.len();
                return Ok(out);
            }
            let Some(c) = r.chars().next() else {
                return Err(format!("unterminated string literal at offset {start}"));
            };
            if quote.len() == 1 && (c == '\n' || c == '\r') {
                return Err(format!("unterminated string literal at offset {start}"));
            }
            self.pos += c.len_utf8();
            if c != '\\' {
                out.push(c);
                continue;
            }
            if raw {
                out.push('\\');
                continue;
            }
            let Some(e) = self.rest().chars().next() else {
                return Err(format!("unterminated string literal at offset {start}"));
            };
            self.pos += e.len_utf8();
            let decoded = match e {
                'a' => '\x07',
                'b' => '\x08',
                'f' => '\x0c',
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                'v' => '\x0b',
                '\\' | '\'' | '"' | '`' | '?' => e,
                'x' | 'X' | 'u' | 'U' | '0'..='7' => {
                    let (len, radix, skip) = match e {
                        'x' | 'X' => (2, 16, 0),
                        'u' => (4, 16, 0),
                        'U' => (8, 16, 0),
                        _ => (3, 8, 1),
                    };
                    // Octal escapes include the digit already consumed.
                    let from = self.pos - skip;
                    let digits = self.src.get(from..from + len).unwrap_or("");
                    let v = u32::from_str_radix(digits, radix)
                        .ok()
                        .filter(|_| digits.len() == len)
                        .and_then(char::from_u32)
                        .ok_or_else(|| format!("invalid escape sequence at offset {from}"))?;
                    self.pos = from + len;
                    v
                }
                _ => {
                    return Err(format!(
                        "invalid escape sequence at offset {}",
                        self.pos - 1
                    ));
                }
            };
            out.push(decoded);
        }
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// cel-go's parser balances chains of `||` and `&&` into a tree of binary calls; an in-order walk
/// sees the operands in source order either way.
fn balance(op: &str, mut terms: Vec<Expr>) -> Expr {
    if terms.len() == 1 {
        return terms.pop().expect("one term");
    }
    let right = terms.split_off(terms.len() / 2);
    Parser::call(op, vec![balance(op, terms), balance(op, right)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_go_hash_fnv() {
        // Values from Go: fmt.Sprintf("%016x", fnv.New64a().Sum64()) after writing the input.
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn selectors_round_trip_to_the_canonical_form() {
        let text = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')";
        let s = ShardSelector::parse(text).expect("valid");
        assert_eq!(s.key, ShardKey::Uid);
        assert_eq!(
            s.ranges,
            vec![(0, 1 << 63), (1 << 63, 1u128 << 64)],
            "{s:?}"
        );
        assert_eq!(s.to_string(), text);
        // Spacing, double quotes and parentheses are CEL's business: the echo is canonical.
        let loose = ShardSelector::parse(
            "  ( shardRange(object.metadata.namespace,\"0x0000000000000000\",'0x00000000000000ff') )",
        )
        .expect("valid");
        assert_eq!(
            loose.to_string(),
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x00000000000000ff')"
        );
    }

    #[test]
    fn three_ranges_keep_their_order() {
        let t = |i| shard_selector_text(i, 7);
        let text = format!("{} || {} || {}", t(5), t(0), t(3));
        let s = ShardSelector::parse(&text).expect("valid");
        assert_eq!(s.to_string(), text);
        assert_eq!(
            s.ranges,
            vec![shard_range(5, 7), shard_range(0, 7), shard_range(3, 7)]
        );
    }

    #[test]
    fn equal_shards_cover_the_space_once() {
        for n in [1u64, 2, 7, 16] {
            let mut next = 0u128;
            for i in 0..n {
                let (s, e) = shard_range(i, n);
                assert_eq!(s, next);
                assert!(s < e);
                next = e;
            }
            assert_eq!(next, 1u128 << 64);
        }
        let (s, e) = shard_range(0, 1);
        let sel = ShardSelector {
            key: ShardKey::Uid,
            ranges: vec![(s, e)],
        };
        assert!(sel.contains(0) && sel.contains(u64::MAX));
    }

    /// The upstream's messages, word for word (k8s.io/apiserver/pkg/sharding/parser.go).
    #[test]
    fn malformed_selectors_get_the_upstream_messages() {
        let z = "'0x0000000000000000'";
        let h = "'0x8000000000000000'";
        let cases: Vec<(String, &str)> = vec![
            (
                "".into(),
                "empty shard selector is not allowed; omit the parameter for unfiltered lists",
            ),
            (
                format!("shardRange(object.metadata.name, {z}, {h})"),
                "unsupported field path \"object.metadata.name\"; supported: object.metadata.uid, object.metadata.namespace",
            ),
            (
                "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')".into(),
                "hexStart must be a 0x-prefixed 16-digit hex value, got \"0x0\" (did you mean \"0x0000000000000000\"?)",
            ),
            (
                format!("shardRange(object.metadata.uid, {h}, {z})"),
                "shard range start 0x8000000000000000 must be less than end 0x0000000000000000",
            ),
            (
                format!("shardRange(object.metadata.uid, {z}, 5)"),
                "hexEnd must be a string literal, got int64",
            ),
            (
                format!("shardRange(object.metadata.uid, {z})"),
                "shardRange() requires exactly 3 arguments, got 2",
            ),
            (
                format!(
                    "shardRange(object.metadata.uid, {z}, {h}) && shardRange(object.metadata.uid, {z}, {h})"
                ),
                "unsupported function \"_&&_\"; only shardRange() and || are allowed",
            ),
            (
                "object.metadata.uid".into(),
                "unexpected expression kind 7; expected shardRange() call or || operator",
            ),
            (
                format!(
                    "shardRange(object.metadata.uid, {z}, {h}) || shardRange(object.metadata.namespace, {z}, {h})"
                ),
                "all shard ranges must use the same field, got \"object.metadata.uid\" and \"object.metadata.namespace\"",
            ),
            (
                format!("shardRange(object.metadata.uid, {z}, '0xABCDEF0000000000')"),
                "hexEnd: invalid hex character \"A\" in \"0xABCDEF0000000000\"",
            ),
            (
                format!("shardRange(object.metadata.uid, {z}, '0x20000000000000000')"),
                "hexEnd: 17-digit hex value must be '0x10000000000000000' (2^64), got \"0x20000000000000000\"",
            ),
            (
                format!("shardRange(object.metadata.uid, {z}, '8000000000000000')"),
                "hexEnd must have '0x' prefix, got \"8000000000000000\"",
            ),
            (
                format!("shardRange(object.metadata.uid, {z}, '0x')"),
                "hexEnd: hex value is required after '0x'",
            ),
            (
                format!("shardRange(object.metadata.uid, {z}, '0x000000000000000000')"),
                "hexEnd: hex value too long (18 chars, max 17): \"000000000000000000\"",
            ),
            (
                format!("shardRange(object.metadata.uid, {z}, object.x)"),
                "hexEnd must be a string literal (e.g. '0xff'), got expression kind 7",
            ),
            (
                format!("shardRange(object['metadata'], {z}, {h})"),
                "shardRange() first argument: expected field path (e.g. object.metadata.uid), got expression kind 1",
            ),
        ];
        for (input, want) in cases {
            let got = ShardSelector::parse(&input).expect_err(&input);
            assert_eq!(got.0, want, "{input}");
        }
    }

    #[test]
    fn syntax_errors_say_cel_parse_error_and_never_panic() {
        for bad in [
            "shardRange(",
            "shardRange(object.metadata.uid, '0x0",
            "||",
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') ||",
            ")",
            "'\\q'",
        ] {
            let e = ShardSelector::parse(bad).expect_err(bad);
            assert!(
                e.0.starts_with("CEL parse error: Syntax error: "),
                "{bad}: {e}"
            );
        }
        let deep = format!("{}x{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(ShardSelector::parse(&deep).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_input_parses_or_errs_without_panic(s in "\\PC{0,80}") {
            let _ = ShardSelector::parse(&s);
        }

        #[test]
        fn a_hash_falls_in_exactly_one_of_n_shards(h: u64, n in 1u64..64) {
            let hits = (0..n)
                .filter(|&i| {
                    let (s, e) = shard_range(i, n);
                    ShardSelector { key: ShardKey::Uid, ranges: vec![(s, e)] }.contains(h)
                })
                .count();
            proptest::prop_assert_eq!(hits, 1);
        }
    }
}
