//! Maps config keys to source lines and source offsets back to keys, so every error can name
//! both the key (`port[0].tx_queues`) and the line it is on.

use toml_edit::{ImDocument, Item, Table, Value};

/// A parsed document that keeps spans.
pub struct Locator {
    doc: Option<ImDocument<String>>,
    /// Byte offset where each line starts, ascending: a line lookup is a binary search, so
    /// locating every error of a large file stays linear in its size.
    line_starts: Vec<usize>,
}

/// One step of a key path.
#[derive(Clone, Debug)]
pub enum Seg<'a> {
    /// A table key.
    Key(&'a str),
    /// An index into an array or array of tables.
    Index(usize),
}

impl Locator {
    /// Parses `src` (errors are reported by the serde pass, not here).
    pub fn new(src: &str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(src.bytes().enumerate().filter(|&(_, b)| b == b'\n').map(|(i, _)| i + 1))
            .collect();
        Locator {
            doc: ImDocument::parse(src.to_string()).ok(),
            line_starts,
        }
    }

    /// The 1-based line of byte `offset`.
    pub fn line_of_offset(&self, offset: usize) -> usize {
        // Lines starting at or before `offset`; the first always does.
        self.line_starts.partition_point(|&s| s <= offset).max(1)
    }

    /// The line where `path` is written: the key's line for a key, the element's for an index.
    /// Falls back to the deepest prefix that exists.
    pub fn line_of(&self, path: &[Seg]) -> Option<usize> {
        let doc = self.doc.as_ref()?;
        let mut best = None;
        let mut cur = Node::Table(doc.as_table());
        for seg in path {
            let (next, span) = match (cur, seg) {
                (Node::Table(t), Seg::Key(k)) => match t.get_key_value(k) {
                    Some((key, item)) => (node_of_item(item), key.span().or_else(|| item.span())),
                    None => break,
                },
                (Node::Item(Item::ArrayOfTables(a)), Seg::Index(i)) => match a.get(*i) {
                    Some(t) => (Node::Table(t), t.span()),
                    None => break,
                },
                (Node::Value(Value::Array(a)), Seg::Index(i)) => match a.get(*i) {
                    Some(v) => (Node::Value(v), v.span()),
                    None => break,
                },
                _ => break,
            };
            if let Some(s) = span {
                best = Some(self.line_of_offset(s.start));
            }
            cur = next;
        }
        best
    }

    /// The dotted key whose value (or header) contains byte `offset`, e.g. `port[1].rx_queues`.
    pub fn key_at(&self, offset: usize) -> Option<String> {
        let doc = self.doc.as_ref()?;
        let mut path = String::new();
        walk_table(doc.as_table(), offset, &mut path)
            .then_some(path)
            .filter(|p| !p.is_empty())
    }
}

#[derive(Clone, Copy)]
enum Node<'a> {
    Table(&'a Table),
    Item(&'a Item),
    Value(&'a Value),
}

fn node_of_item(item: &Item) -> Node<'_> {
    match item {
        Item::Table(t) => Node::Table(t),
        Item::Value(Value::InlineTable(_)) | Item::ArrayOfTables(_) | Item::None => Node::Item(item),
        Item::Value(v) => Node::Value(v),
    }
}

fn contains(span: Option<std::ops::Range<usize>>, offset: usize) -> bool {
    span.is_some_and(|s| s.start <= offset && offset < s.end.max(s.start + 1))
}

fn push_key(path: &mut String, k: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(k);
}

/// Descends into whatever contains `offset`, extending `path`; true if anything matched.
fn walk_table(t: &Table, offset: usize, path: &mut String) -> bool {
    for (k, item) in t.iter() {
        let key_span = t.key(k).and_then(|key| key.span());
        let base = path.len();
        match item {
            Item::Table(sub) => {
                push_key(path, k);
                if walk_table(sub, offset, path) || contains(sub.span(), offset) || contains(key_span.clone(), offset) {
                    return true;
                }
            }
            Item::ArrayOfTables(a) => {
                for (i, sub) in a.iter().enumerate() {
                    path.truncate(base);
                    push_key(path, k);
                    path.push_str(&format!("[{i}]"));
                    if walk_table(sub, offset, path) || contains(sub.span(), offset) {
                        return true;
                    }
                }
            }
            Item::Value(v) => {
                push_key(path, k);
                if contains(key_span.clone(), offset) {
                    return true;
                }
                if contains(v.span(), offset) {
                    if let Value::Array(a) = v {
                        for (i, e) in a.iter().enumerate() {
                            if contains(e.span(), offset) {
                                path.push_str(&format!("[{i}]"));
                                break;
                            }
                        }
                    }
                    return true;
                }
            }
            Item::None => {}
        }
        path.truncate(base);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str =
        "[dpdk]\neal_args = [\"a\", \"b\"]\n\n[[port]]\ndevice = \"x\"\n\n[[port]]\ndevice = \"y\"\nrx_queues = 2\n";

    #[test]
    fn lines_of_keys() {
        let l = Locator::new(SRC);
        assert_eq!(l.line_of(&[Seg::Key("dpdk"), Seg::Key("eal_args")]), Some(2));
        assert_eq!(
            l.line_of(&[Seg::Key("port"), Seg::Index(1), Seg::Key("rx_queues")]),
            Some(9)
        );
        assert_eq!(
            l.line_of(&[Seg::Key("port"), Seg::Index(1), Seg::Key("missing")]),
            Some(7)
        );
    }

    #[test]
    fn lines_of_offsets() {
        let l = Locator::new("a\nbb\n\nc");
        let lines: Vec<usize> = (0..9).map(|o| l.line_of_offset(o)).collect();
        // Past the end: the last line, as the old count of newlines before the offset said.
        assert_eq!(lines, [1, 1, 2, 2, 2, 3, 4, 4, 4]);
        assert_eq!(Locator::new("").line_of_offset(5), 1);
    }

    #[test]
    fn keys_at_offsets() {
        let l = Locator::new(SRC);
        let at = SRC.find("2\n").unwrap();
        assert_eq!(l.key_at(at).as_deref(), Some("port[1].rx_queues"));
        let at = SRC.find("\"b\"").unwrap();
        assert_eq!(l.key_at(at).as_deref(), Some("dpdk.eal_args[1]"));
    }
}
