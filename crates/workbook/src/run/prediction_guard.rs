//! Keeps a prediction a prediction. `src/predict.rs` is built as a crate of its own, without
//! gpumem and with unsafe code forbidden (its official `Cargo.toml`), so what is left to a learner
//! who would measure instead of predicting is std's doors to the outside: running a program (its
//! own test binary, which measures), reading a file or the environment, the network, and the
//! macros that read files or variables at build time. A scratch copy whose predictions name one
//! of them gets a compile error saying which and where, so `check`, `grade` and `verify` refuse
//! it as the compiler refuses a prediction that calls gpumem.
//!
//! Rust cannot reach a module or a macro without writing its name (no reflection; `r#process` is
//! `process`), so looking at the identifiers, outside comments and literals, is enough, once a
//! prediction may not define a macro (`macro_rules!` can paste a name given as a plain word into
//! a path) nor build another file as a module.

/// std's modules that lead out of the process, with what each would let a prediction do: refused
/// in a path (`std::process::Command`, `process::exit`) or a `use` (`use std::{fs, io}`), never
/// as a plain name (`let net = ...` is fine).
const MODULES: &[(&str, &str)] = &[
    ("process", "runs a program"),
    ("fs", "reads or writes files"),
    ("net", "uses the network"),
    ("env", "reads the environment"),
    ("os", "uses the operating system's own modules"),
];

/// Macros that read files or the environment at build time, refused when called (`name!`).
const MACROS: &[(&str, &str)] = &[
    ("env", "reads the environment at build time"),
    ("option_env", "reads the environment at build time"),
    ("include", "includes another file at build time"),
    ("include_str", "reads a file at build time"),
    ("include_bytes", "reads a file at build time"),
];

/// What a prediction's source uses that it may not: the name, its line, and what it would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Door {
    /// The name as the compiler reads it (`process` for `r#process`).
    pub name: String,
    /// Its line in the file, from 1.
    pub line: usize,
    /// What using it would let the prediction do.
    pub does: &'static str,
}

impl Door {
    /// The compile error appended to a scratch copy of `src/predict.rs`.
    pub fn compile_error(&self) -> String {
        let message = format!(
            "src/predict.rs:{} uses `{}`, which {}: a prediction cannot run programs, read files \
             or the environment, or use the network. It is made before measuring; the tests \
             measure and compare.",
            self.line, self.name, self.does
        );
        format!("\ncompile_error!({message:?});\n")
    }
}

/// The first door to the outside that `source` (a `src/predict.rs`) uses, if any. Besides std's
/// modules and macros: `extern` (another crate or a C library), and what this check would not
/// see through: a module read from another file (`mod name;`, `#[path = "..."]`) and a macro of
/// its own (`macro_rules!`, which could paste a name into a path).
pub fn first_door(source: &str) -> Option<Door> {
    let tokens = tokens(source);
    let punct = |i: Option<usize>, c: char| i.and_then(|i| tokens.get(i)) == Some(&Token::Punct(c));
    let mut in_use = false;
    for (i, token) in tokens.iter().enumerate() {
        let Token::Word(word, line) = token else {
            if punct(Some(i), ';') {
                in_use = false;
            }
            continue;
        };
        let door = |does| {
            Some(Door {
                name: word.clone(),
                line: *line,
                does,
            })
        };
        if word == "use" {
            in_use = true;
        }
        let in_path = (punct(i.checked_sub(2), ':') && punct(i.checked_sub(1), ':'))
            || (punct(Some(i + 1), ':') && punct(Some(i + 2), ':'));
        if let Some((_, does)) = MODULES.iter().find(|(name, _)| name == word)
            && (in_path || in_use)
        {
            return door(does);
        }
        if let Some((_, does)) = MACROS.iter().find(|(name, _)| name == word)
            && punct(Some(i + 1), '!')
        {
            return door(does);
        }
        if word == "macro_rules" {
            // `m!(process)` with `std::$a::Command` inside would build a path unseen here.
            return door("defines a macro, which could build a path this check cannot see");
        }
        if word == "extern" {
            return door("links another crate or library");
        }
        if word == "path" && punct(Some(i + 1), '=') {
            return door("names another file to build as a module");
        }
        if word == "mod"
            && matches!(tokens.get(i + 1), Some(Token::Word(..)))
            && punct(Some(i + 2), ';')
        {
            return door("builds another file as a module");
        }
    }
    None
}

#[derive(Debug, PartialEq)]
enum Token {
    /// An identifier or keyword, and its line.
    Word(String, usize),
    /// Any other character outside comments and literals.
    Punct(char),
}

/// The identifiers and punctuation of Rust source, comments and literals left out.
fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let is_word_start = |c: char| c == '_' || c.is_alphabetic();
    let is_word = |c: char| c == '_' || c.is_alphanumeric();
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && next == Some('/') {
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
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if let Some(end) = raw_string_end(&chars, i) {
            line += chars[i..end].iter().filter(|&&c| c == '\n').count();
            i = end;
        } else if c == '"' || (matches!(c, 'b' | 'c') && next == Some('"')) {
            i += if c == '"' { 1 } else { 2 };
            while i < chars.len() && chars[i] != '"' {
                line += usize::from(chars[i] == '\n');
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' || (c == 'b' && next == Some('\'')) {
            let start = if c == '\'' { i + 1 } else { i + 2 };
            i = match (chars.get(start), chars.get(start + 1)) {
                // '\n', '\'', '\u{1F600}': a character literal with an escape.
                (Some('\\'), _) => {
                    let mut j = start + 2;
                    while j < chars.len() && chars[j] != '\'' {
                        j += 1;
                    }
                    j + 1
                }
                // 'x': a character literal.
                (Some(_), Some('\'')) => start + 2,
                // 'a: a lifetime or a label; its name is no door.
                _ => {
                    let mut j = start;
                    while j < chars.len() && is_word(chars[j]) {
                        j += 1;
                    }
                    j
                }
            };
        } else if c == 'r' && next == Some('#') && chars.get(i + 2).is_some_and(|&c| is_word(c)) {
            // r#name is name.
            i += 2;
        } else if is_word_start(c) {
            let start = i;
            while i < chars.len() && is_word(chars[i]) {
                i += 1;
            }
            out.push(Token::Word(chars[start..i].iter().collect(), line));
        } else if c.is_ascii_digit() {
            while i < chars.len() && (is_word(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else {
            if !c.is_whitespace() {
                out.push(Token::Punct(c));
            }
            i += 1;
        }
    }
    out
}

/// Where a raw string literal (`r"…"`, `r#"…"#`, `br"…"`, `cr"…"`) starting at `i` ends.
fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if matches!(chars.get(j), Some('b' | 'c')) {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = chars[j..].iter().take_while(|&&c| c == '#').count();
    j += hashes;
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"' && chars[j + 1..].iter().take_while(|&&c| c == '#').count() >= hashes {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(chars.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn door(source: &str) -> Option<(String, usize)> {
        first_door(source).map(|d| (d.name, d.line))
    }

    #[test]
    fn a_prediction_that_runs_its_own_test_binary_is_refused() {
        let source = "pub fn predict() -> u64 {\n    let me = std::env::current_exe().unwrap();\n    \
                      let out = std::process::Command::new(me).output().unwrap();\n    \
                      out.stdout.len() as u64\n}\n";
        assert_eq!(door(source), Some(("env".to_string(), 2)));
        assert_eq!(
            door("use std::process as p;\nfn f() { p::Command::new(\"x\"); }"),
            Some(("process".to_string(), 1))
        );
    }

    #[test]
    fn every_spelling_of_a_door_is_seen() {
        for source in [
            "fn f() { std::fs::read(\"a\"); }",
            "use std::r#process;",
            "use std::{io, net::TcpStream};",
            "const A: &str = include_str!(\"../tests/a.rs\");",
            "const A: Option<&str> = option_env!(\"X\");",
            "#[path = \"other.rs\"] mod other;",
            "mod other;",
            "extern crate std as s;",
            "use std::os::unix::ffi::OsStrExt;",
            "use std::{io, fs};",
            "use std as s; fn f() { s::process::exit(0) }",
            "fn f() -> u64 { env!(\"HOME\").len() as u64 }",
            "macro_rules! m { ($a:ident) => { std::$a::Command::new(\"x\") } } fn f() { m!(process); }",
        ] {
            assert!(first_door(source).is_some(), "{source:?} was not refused");
        }
    }

    #[test]
    fn words_in_comments_strings_and_lifetimes_are_no_doors() {
        let source = "//! Predicts the process's peak, without fs or env.\n\
                      /* std::process::Command /* nested */ std::fs */\n\
                      /// Uses no `env`.\n\
                      pub fn f<'process>(x: &'process str) -> (&'process str, char, &'static str) {\n\
                      let _ = r#\"std::fs \" still raw\"#;\n\
                      let _ = b\"env\";\n\
                      (x, '\\'', \"std::process \\\" env\")\n}\n\
                      mod inline { pub fn fs_free() {} }\n\
                      fn g(net: u64, os: u64, env: u64, path: &str) -> u64 { let fs = net + os + env; fs }\n";
        assert_eq!(door(source), None);
    }

    #[test]
    fn the_compile_error_names_the_line_and_why() {
        let found = first_door("\n\nuse std::process;").expect("a door");
        let error = found.compile_error();
        assert!(error.contains("compile_error!("), "{error}");
        assert!(
            error.contains("src/predict.rs:3 uses `process`, which runs a program"),
            "{error}"
        );
    }

    #[test]
    fn every_reference_prediction_passes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut seen = 0;
        for dir in ["solutions", "exercises"] {
            for entry in std::fs::read_dir(root.join(dir)).expect("the chapters") {
                let path = entry.expect("an entry").path().join("src/predict.rs");
                let Ok(source) = std::fs::read_to_string(&path) else {
                    continue;
                };
                assert_eq!(first_door(&source), None, "{}", path.display());
                seen += 1;
            }
        }
        assert!(seen >= 26, "only {seen} prediction files found");
    }
}
