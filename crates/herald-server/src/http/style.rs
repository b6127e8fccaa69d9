//! The style sheet herald's HTML pages share (the status page and the explain form).

/// The pages' CSS.
pub const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}\
table{border-collapse:collapse}td,th{padding:.2em .8em;border-bottom:1px solid #ddd;text-align:left}\
td.n{text-align:right;font-variant-numeric:tabular-nums}.ok{color:#176f2c}.stale{color:#b00020}\
.syncing{color:#a66b00}.dim{color:#777}dl{display:grid;grid-template-columns:max-content auto;gap:.1em 1em}\
dt{color:#555}dd{margin:0;font-weight:600}";
