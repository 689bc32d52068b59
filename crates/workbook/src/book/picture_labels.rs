//! The words of the book's pictures in the reader's language: the labels of the SVG pictures
//! (`<text>` elements, and the `<title>` tooltips) and the step titles of the interactive views
//! (`steps` in `pictures/<page>-history.json`).
//!
//! A label is translated by its words, with its numbers taken out: "1022 events · peak allocated
//! 50.38 MiB" is the message "%1 events · peak allocated %2", and its translation gets the
//! numbers back in the order it names them. One message then serves every picture that says the
//! same thing with other numbers, and a picture redrawn with new numbers needs no new
//! translation. A label with no word left ("20 MiB", "2 MiB − 512 B") is not a message.

use super::i18n::lookup;
use crate::snapshot::viz::esc;
use anyhow::{Context, Result};
use polib::catalog::Catalog;
use std::path::{Path, PathBuf};

/// The units a number in a label may carry; they go with the number.
const UNITS: [&str; 11] = [
    "B", "KiB", "MiB", "GiB", "TiB", "bytes", "ns", "µs", "ms", "s", "%",
];

/// A label's message and the numbers taken out of it, in order: `("%1 events", ["1022"])`.
/// `None` for a label with no word of two letters left.
pub fn template(label: &str) -> Option<(String, Vec<String>)> {
    let chars: Vec<char> = label.chars().collect();
    let mut message = String::new();
    let mut values = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_number = chars[i].is_ascii_digit()
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'));
        if !starts_number {
            message.push(chars[i]);
            i += 1;
            continue;
        }
        let mut end = i;
        while end < chars.len()
            && (chars[end].is_ascii_digit()
                || (matches!(chars[end], '.' | ',')
                    && chars.get(end + 1).is_some_and(char::is_ascii_digit)))
        {
            end += 1;
        }
        // a unit right after the number, or after one space
        let rest: String = chars[end..].iter().collect();
        let unit = UNITS
            .iter()
            .filter_map(|u| {
                let spaced = format!(" {u}");
                [(u.to_string(), u.len()), (spaced, u.len() + 1)]
                    .into_iter()
                    .find(|(with, _)| {
                        rest.starts_with(with.as_str())
                            && !rest[with.len()..]
                                .chars()
                                .next()
                                .is_some_and(|c| c.is_alphanumeric() || c == '_')
                    })
                    .map(|(with, _)| with.chars().count())
            })
            .max();
        let end = end + unit.unwrap_or(0);
        if end < chars.len() && (chars[end].is_alphabetic() || chars[end] == '_') {
            // part of a name (`sm_90`, `ch10`): not a number
            message.extend(&chars[i..end]);
            i = end;
            continue;
        }
        values.push(chars[i..end].iter().collect());
        message.push_str(&format!("%{}", values.len()));
        i = end;
    }
    let mut letters = 0;
    let mut words = false;
    for c in message.chars() {
        letters = if c.is_alphabetic() { letters + 1 } else { 0 };
        words |= letters >= 2 || (c.is_alphabetic() && !c.is_ascii());
    }
    words.then_some((message, values))
}

/// `message`'s translation with `values` put back for `%1`, `%2`, ...; `None` when it has no
/// translation, or names a number the label does not have.
fn fill(catalog: &Catalog, message: &str, values: &[String]) -> Option<String> {
    let translated = lookup(catalog, message);
    if translated == message {
        return None;
    }
    let mut out = String::new();
    let mut rest = translated;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let digits: String = rest[at + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if digits.is_empty() {
            out.push('%');
            rest = &rest[at + 1..];
            continue;
        }
        let n: usize = digits.parse().ok()?;
        out.push_str(values.get(n.checked_sub(1)?)?);
        rest = &rest[at + 1 + digits.len()..];
    }
    out.push_str(rest);
    Some(out)
}

/// A label's text as written by [`esc`], the escaping the pictures are drawn with, undone.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The labels of an SVG picture whose content is plain text: its `<text>` elements, and its
/// `<title>` elements (the tooltips a pointer or a screen reader reads), as (where the content
/// starts, where it ends, the text), in the order they come.
fn svg_texts(svg: &str) -> Vec<(usize, usize, String)> {
    let mut texts = Vec::new();
    for tag in ["text", "title"] {
        let (open, close) = (format!("<{tag}"), format!("</{tag}>"));
        let mut from = 0;
        while let Some(at) = svg[from..].find(&open).map(|p| p + from) {
            let Some(open_end) = svg[at..].find('>').map(|p| p + at + 1) else {
                break;
            };
            // `<text` also starts `<textPath`: only the element itself
            if !matches!(svg.as_bytes().get(at + open.len()), Some(b'>' | b' ')) {
                from = open_end;
                continue;
            }
            let Some(end) = svg[open_end..].find(&close).map(|p| p + open_end) else {
                break;
            };
            let inner = &svg[open_end..end];
            if !inner.contains('<') {
                texts.push((open_end, end, unescape(inner)));
            }
            from = end;
        }
    }
    texts.sort_by_key(|(start, ..)| *start);
    texts
}

/// The messages of an SVG picture's labels.
pub fn svg_messages(svg: &str) -> Vec<String> {
    svg_texts(svg)
        .into_iter()
        .filter_map(|(_, _, text)| template(text.trim()).map(|(message, _)| message))
        .collect()
}

/// An SVG picture with every label that `catalog` translates translated.
pub fn translate_svg(svg: &str, catalog: &Catalog) -> String {
    let mut out = String::with_capacity(svg.len());
    let mut copied = 0;
    for (start, end, text) in svg_texts(svg) {
        let Some((message, values)) = template(text.trim()) else {
            continue;
        };
        if let Some(translated) = fill(catalog, &message, &values) {
            out.push_str(&svg[copied..start]);
            out.push_str(&esc(&translated));
            copied = end;
        }
    }
    out.push_str(&svg[copied..]);
    out
}

/// The step titles of an interactive view's history (`steps`: `[event, title]` pairs).
fn step_titles(history: &serde_json::Value) -> Vec<&str> {
    history["steps"]
        .as_array()
        .map(|steps| steps.iter().filter_map(|s| s[1].as_str()).collect())
        .unwrap_or_default()
}

/// The messages of an interactive view's step titles.
pub fn history_messages(json: &str) -> Vec<String> {
    let Ok(history) = serde_json::from_str::<serde_json::Value>(json) else {
        return Vec::new();
    };
    step_titles(&history)
        .into_iter()
        .filter_map(|title| template(title).map(|(message, _)| message))
        .collect()
}

/// An interactive view's history with its step titles translated; the rest as it was.
pub fn translate_history(json: &str, catalog: &Catalog) -> Result<String> {
    let mut history: serde_json::Value =
        serde_json::from_str(json).context("reading a view's history")?;
    if let Some(steps) = history["steps"].as_array_mut() {
        for step in steps {
            let Some(title) = step[1].as_str() else {
                continue;
            };
            if let Some((message, values)) = template(title)
                && let Some(translated) = fill(catalog, &message, &values)
            {
                step[1] = translated.into();
            }
        }
    }
    Ok(history.to_string())
}

/// The pictures a page shows: its SVG pictures (`pictures/NAME.svg` in its Markdown) and its
/// views' histories (`pictures/PAGE-history.json`, which the script loads for the page), as
/// paths under `src/`, those that exist.
pub fn page_pictures(src: &Path, page: &Path, content: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut rest = content;
    while let Some(at) = rest.find("pictures/") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| !matches!(c, ')' | '"' | '\'' | ' ' | '\n' | '>'))
            .collect();
        if name.ends_with(".svg") {
            let path = PathBuf::from(&name);
            if !found.contains(&path) {
                found.push(path);
            }
        }
        rest = &rest[at + "pictures/".len()..];
    }
    if let Some(stem) = page.file_stem() {
        found.push(PathBuf::from(format!(
            "pictures/{}-history.json",
            stem.to_string_lossy()
        )));
    }
    found.retain(|p| src.join(p).is_file());
    found
}

/// The messages of a picture under `src/` ([`page_pictures`]).
pub fn picture_messages(src: &Path, picture: &Path) -> Result<Vec<String>> {
    let path = src.join(picture);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(if picture.extension().is_some_and(|e| e == "json") {
        history_messages(&text)
    } else {
        svg_messages(&text)
    })
}

/// Translates the pictures mdBook copied into a built book (`out/pictures/`): every SVG's labels
/// and every view history's step titles.
pub fn translate_built_pictures(out: &Path, catalog: &Catalog) -> Result<()> {
    let dir = out.join("pictures");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    for entry in entries {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        let name = path.to_string_lossy().into_owned();
        let translated = if name.ends_with(".svg") {
            let svg = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            translate_svg(&svg, catalog)
        } else if name.ends_with("-history.json") {
            let json = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            translate_history(&json, catalog).with_context(|| path.display().to_string())?
        } else {
            continue;
        };
        std::fs::write(&path, translated).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use polib::catalog::Catalog;
    use polib::message::Message;
    use polib::metadata::CatalogMetadata;

    fn catalog(pairs: &[(&str, &str)]) -> Catalog {
        let mut c = Catalog::new(CatalogMetadata::new());
        for (id, text) in pairs {
            c.append_or_update(
                Message::build_singular()
                    .with_msgid(id.to_string())
                    .with_msgstr(text.to_string())
                    .done(),
            );
        }
        c
    }

    #[test]
    fn numbers_and_their_units_leave_the_message() {
        assert_eq!(
            template("1022 events · peak allocated 50.38 MiB"),
            Some((
                "%1 events · peak allocated %2".to_string(),
                vec!["1022".to_string(), "50.38 MiB".to_string()]
            ))
        );
        assert_eq!(
            template("1. The workload as written").unwrap().0,
            "%1. The workload as written"
        );
        assert_eq!(template("2 MiB − 512 B"), None);
        assert_eq!(template("20 MiB"), None);
        // names with digits stay whole
        assert_eq!(template("sm_90 on cuda:0").unwrap().0, "sm_90 on cuda:%1");
        assert_eq!(template("ch10 stream 1").unwrap().0, "ch10 stream %1");
    }

    #[test]
    fn a_translated_label_gets_its_numbers_back_in_the_order_it_names_them() {
        let c = catalog(&[(
            "%1 events · peak allocated %2",
            "최대 할당 %2 · 이벤트 %1개",
        )]);
        let svg = r#"<svg><title>7 events · peak allocated 2 MiB</title><text x="1">1022 events · peak allocated 50.38 MiB</text><text>20 MiB</text><text>other &amp; more</text></svg>"#;
        assert_eq!(
            translate_svg(svg, &c),
            r#"<svg><title>최대 할당 2 MiB · 이벤트 7개</title><text x="1">최대 할당 50.38 MiB · 이벤트 1022개</text><text>20 MiB</text><text>other &amp; more</text></svg>"#
        );
        assert_eq!(
            svg_messages(svg),
            [
                "%1 events · peak allocated %2",
                "%1 events · peak allocated %2",
                "other & more"
            ]
        );
        // a translation naming a number the label lacks is not used
        let c = catalog(&[("%1 events · peak allocated %2", "%3")]);
        assert_eq!(translate_svg(svg, &c), svg);
    }

    #[test]
    fn a_views_step_titles_are_translated_and_the_rest_kept() {
        let c = catalog(&[(
            "%1. The workload as written",
            "%1. 작성된 그대로의 작업 부하",
        )]);
        let json =
            r#"{"steps":[[0,"1. The workload as written"],[5,"2. Other"]],"trace":[[1,"alloc"]]}"#;
        let out: serde_json::Value =
            serde_json::from_str(&translate_history(json, &c).unwrap()).unwrap();
        assert_eq!(out["steps"][0][1], "1. 작성된 그대로의 작업 부하");
        assert_eq!(out["steps"][1][1], "2. Other");
        assert_eq!(out["trace"][0][1], "alloc");
        assert_eq!(
            history_messages(json),
            ["%1. The workload as written", "%1. Other"]
        );
    }
}
