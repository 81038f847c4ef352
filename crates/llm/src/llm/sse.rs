//! Server-sent events (`text/event-stream`), read incrementally: bytes in, events out.
//!
//! Owns the wire format as the HTML standard defines it: lines end in `\n`, `\r\n` or `\r`; a line
//! `field: value` (one optional space after the colon) sets `event` or appends to `data` (several
//! `data` lines are joined with `\n`); a line starting with `:` is a comment; an empty line
//! dispatches the event (one without `data` is dropped); a byte-order mark at the start is
//! skipped; `id` and `retry` are read and ignored (bork-ci never reconnects). It does not know
//! what an event means (`openai` and `anthropic` do) and does no I/O.
//!
//! Written here rather than taken from a crate: the format is small, the one widely used parser
//! crate (`eventsource-stream`) has had no release since 2022, and this one bounds what a hostile
//! server can make it buffer ([`MAX_EVENT_BYTES`]).

/// Largest event (all its `data` lines, or one line without its end) buffered; a server sending
/// more without dispatching is refused rather than buffered.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event` field; empty when the server sent none (the standard's default `message`).
    pub event: String,
    /// The `data` lines joined with `\n`.
    pub data: String,
}

/// The stream broke the format's bounds, or was not text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an event of more than {MAX_EVENT_BYTES} bytes")]
    TooLarge,
    #[error("a line that is not UTF-8")]
    NotUtf8,
}

/// An incremental parser: feed it chunks as they arrive, in order.
#[derive(Debug, Default)]
pub struct Parser {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The last chunk ended in `\r`: a `\n` starting the next one ends no second line.
    after_cr: bool,
    /// Whether anything was read yet (for the byte-order mark).
    started: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl Parser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads `bytes` and calls `on_event` for every event they complete.
    pub fn push(&mut self, mut bytes: &[u8], on_event: &mut impl FnMut(Event)) -> Result<(), SseError> {
        if !self.started && !bytes.is_empty() {
            // The BOM may arrive split over chunks only in theory; servers send it whole or not.
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            self.started = true;
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', bytes) {
            let (line, rest) = bytes.split_at(end);
            if self.line.is_empty() {
                self.line_done(line, on_event)?;
            } else {
                self.line.extend_from_slice(line);
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, on_event)?;
            }
            bytes = if rest[0] == b'\r' {
                match rest.get(1) {
                    Some(b'\n') => &rest[2..],
                    Some(_) => &rest[1..],
                    None => {
                        self.after_cr = true;
                        &rest[1..]
                    }
                }
            } else {
                &rest[1..]
            };
        }
        if self.line.len() + bytes.len() > MAX_EVENT_BYTES {
            return Err(SseError::TooLarge);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// The stream ended: an event whose blank line never came is not dispatched (the standard's
    /// rule), so a cut-off stream cannot pass for a whole one.
    pub fn finish(&mut self) {
        self.line.clear();
        self.event.clear();
        self.data.clear();
        self.has_data = false;
    }

    fn line_done(&mut self, line: &[u8], on_event: &mut impl FnMut(Event)) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                on_event(Event {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data),
                });
            } else {
                self.event.clear();
            }
            self.has_data = false;
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            "data" => {
                if self.data.len() + value.len() + 1 > MAX_EVENT_BYTES {
                    return Err(SseError::TooLarge);
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Result<Vec<(String, String)>, SseError> {
        let mut parser = Parser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk, &mut |event: Event| out.push((event.event, event.data)))?;
        }
        parser.finish();
        Ok(out)
    }

    /// A case: its name, the chunks fed, the events expected.
    type Case<'a> = (&'a str, Vec<&'a [u8]>, Vec<(String, String)>);

    fn pair(event: &str, data: &str) -> (String, String) {
        (event.to_owned(), data.to_owned())
    }

    #[test]
    fn the_standards_cases() {
        let cases: Vec<Case> = vec![
            ("one data line", vec![b"data: x\n\n"], vec![pair("", "x")]),
            (
                "no space after the colon",
                vec![b"data:x\n\n"],
                vec![pair("", "x")],
            ),
            ("two spaces keep one", vec![b"data:  x\n\n"], vec![pair("", " x")]),
            (
                "named, multi-line",
                vec![b"event: delta\ndata: a\ndata: b\n\n"],
                vec![pair("delta", "a\nb")],
            ),
            ("CRLF", vec![b"event: e\r\ndata: x\r\n\r\n"], vec![pair("e", "x")]),
            ("CR alone", vec![b"data: x\r\r"], vec![pair("", "x")]),
            (
                "CRLF split over chunks",
                vec![b"data: x\r", b"\n\r", b"\n"],
                vec![pair("", "x")],
            ),
            (
                "a line split anywhere",
                vec![b"da", b"ta: h", b"ello\n", b"\n"],
                vec![pair("", "hello")],
            ),
            (
                "comments and pings",
                vec![b": ping\n\ndata: x\n\n"],
                vec![pair("", "x")],
            ),
            ("no data: nothing", vec![b"event: ping\n\n"], vec![]),
            ("empty data is an event", vec![b"data\n\n"], vec![pair("", "")]),
            (
                "id and retry ignored",
                vec![b"id: 1\nretry: 5\ndata: x\n\n"],
                vec![pair("", "x")],
            ),
            (
                "byte-order mark",
                vec![b"\xEF\xBB\xBFdata: x\n\n"],
                vec![pair("", "x")],
            ),
            (
                "an unfinished event is dropped",
                vec![b"data: x\n\ndata: y\n"],
                vec![pair("", "x")],
            ),
            (
                "the event name resets",
                vec![b"event: a\ndata: 1\n\ndata: 2\n\n"],
                vec![pair("a", "1"), pair("", "2")],
            ),
        ];
        for (name, chunks, expected) in cases {
            assert_eq!(events(&chunks).expect(name), expected, "{name}");
        }
    }

    #[test]
    fn every_split_of_a_stream_gives_the_same_events() {
        let stream: &[u8] =
            b"event: message_start\r\ndata: {\"a\":1}\r\n\r\n: c\n\nevent: d\ndata: x\ndata: y\r\rdata: [DONE]\n\n";
        let whole = events(&[stream]).expect("whole");
        assert_eq!(whole.len(), 3);
        for split in 0..=stream.len() {
            let (a, b) = stream.split_at(split);
            assert_eq!(events(&[a, b]).expect("split"), whole, "split at {split}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&bytes).expect("bytewise"), whole);
    }

    #[test]
    fn bounds_hold() {
        let mut parser = Parser::new();
        let huge = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert_eq!(parser.push(&huge, &mut |_| {}), Err(SseError::TooLarge));
        let mut parser = Parser::new();
        let line = format!("data: {}\n", "y".repeat(MAX_EVENT_BYTES / 2));
        assert!(parser.push(line.as_bytes(), &mut |_| {}).is_ok());
        assert_eq!(parser.push(line.as_bytes(), &mut |_| {}), Err(SseError::TooLarge));
        assert_eq!(
            Parser::new().push(b"data: \xff\n\n", &mut |_| {}),
            Err(SseError::NotUtf8)
        );
    }
}
