//! JUnit XML (pytest's `--junit-xml`, and any tool that writes it): each `<testcase>` holding a
//! `<failure>` or an `<error>` is a failure. Pure.
//!
//! The file and line come from the last `FILE:LINE:` line of the failure's text (pytest's
//! traceback ends at the failing line), else from the test case's (or its suite's) `file` and
//! `line` attributes. The reader is quick-xml's: no DTD is read, no entity other than XML's
//! five and character references is expanded, nesting deeper than [`super::MAX_DEPTH`] and
//! malformed XML end the reading with what was read so far.

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use super::{Collected, Failure, MAX_DEPTH, MAX_MESSAGE, file_line};

/// A `<testcase>` being read.
#[derive(Default)]
struct Case {
    name: String,
    classname: String,
    file: Option<String>,
    line: Option<u32>,
    /// `Some` once a `<failure>` or `<error>` was seen: its `message` and text.
    failed: Option<(String, String)>,
}

/// The failures in the JUnit XML `text`.
pub fn parse(text: &str) -> Collected {
    let mut collected = Collected::default();
    let mut reader = Reader::from_str(text);
    let mut depth = 0usize;
    let mut suite_file: Vec<Option<String>> = Vec::new();
    let mut case: Option<Case> = None;
    // Inside a `<failure>` or `<error>` of the current case: its text goes to the message.
    let mut in_failure = false;
    loop {
        let event = match reader.read_event() {
            Ok(Event::Eof) | Err(_) => break,
            Ok(event) => event,
        };
        match event {
            Event::Start(start) => {
                depth += 1;
                if depth > MAX_DEPTH {
                    break;
                }
                match start.local_name().as_ref() {
                    "testsuite" => suite_file.push(attribute(&start, "file")),
                    "testcase" => case = Some(open_case(&start, suite_file.last().cloned().flatten())),
                    "failure" | "error" => {
                        if let Some(case) = case.as_mut() {
                            case.failed.get_or_insert_with(|| {
                                (attribute(&start, "message").unwrap_or_default(), String::new())
                            });
                            in_failure = true;
                        }
                    }
                    _ => {}
                }
            }
            Event::Empty(start) => match start.local_name().as_ref() {
                "testcase" => {
                    let case = open_case(&start, suite_file.last().cloned().flatten());
                    close_case(case, &mut collected);
                }
                "failure" | "error" => {
                    if let Some(case) = case.as_mut() {
                        case.failed.get_or_insert_with(|| {
                            (attribute(&start, "message").unwrap_or_default(), String::new())
                        });
                    }
                }
                _ => {}
            },
            Event::End(end) => {
                depth = depth.saturating_sub(1);
                match end.local_name().as_ref() {
                    "testsuite" => {
                        suite_file.pop();
                    }
                    "testcase" => {
                        if let Some(case) = case.take() {
                            close_case(case, &mut collected);
                        }
                    }
                    "failure" | "error" => in_failure = false,
                    _ => {}
                }
            }
            Event::Text(text) if in_failure => append(&mut case, &text.xml10_content()),
            Event::CData(data) if in_failure => append(&mut case, &data),
            Event::GeneralRef(reference) if in_failure => {
                let resolved = match reference.resolve_char_ref() {
                    Ok(Some(c)) => Some(c.to_string()),
                    Ok(None) => quick_xml::escape::resolve_predefined_entity(&reference).map(str::to_owned),
                    Err(_) => None,
                };
                if let Some(resolved) = resolved {
                    append(&mut case, &resolved);
                }
            }
            _ => {}
        }
        if collected.failures.len() > super::MAX_FAILURES {
            break;
        }
    }
    collected
}

fn open_case(start: &BytesStart, suite_file: Option<String>) -> Case {
    Case {
        name: attribute(start, "name").unwrap_or_default(),
        classname: attribute(start, "classname").unwrap_or_default(),
        file: attribute(start, "file").or(suite_file),
        line: attribute(start, "line").and_then(|line| line.trim().parse().ok()),
        failed: None,
    }
}

fn append(case: &mut Option<Case>, text: &str) {
    if let Some((_, body)) = case.as_mut().and_then(|case| case.failed.as_mut())
        && body.len() < MAX_MESSAGE * 4
    {
        body.push_str(bork_ci_core::untrusted::head(text, MAX_MESSAGE * 4 - body.len()));
    }
}

fn close_case(case: Case, collected: &mut Collected) {
    let Some((message, body)) = case.failed else {
        return;
    };
    let from_text = body.lines().rev().find_map(|line| {
        let (file, number) = file_line(line)?;
        // pytest's `tests/test_x.py:5: AssertionError`: a path, then the line and a reason.
        (file.contains('.') || file.contains('/')).then_some((file, number))
    });
    let (file, line) = match from_text {
        Some((file, number)) => (Some(file), Some(number)),
        None => (case.file, case.line),
    };
    let test = match (case.classname.is_empty(), case.name.is_empty()) {
        (false, false) => format!("{}.{}", case.classname, case.name),
        (true, false) => case.name,
        (false, true) => case.classname,
        (true, true) => String::new(),
    };
    let message = match (message.trim().is_empty(), body.trim().is_empty()) {
        (false, false) => format!("{}\n{}", message.trim(), body.trim()),
        (false, true) => message,
        _ => body,
    };
    collected.push(Failure {
        file,
        line,
        test: Some(test),
        message,
    });
}

/// An attribute's value with XML's own escapes resolved (no other entity), bounded.
fn attribute(start: &BytesStart, name: &str) -> Option<String> {
    let attribute = start.try_get_attribute(name).ok()??;
    let value = attribute
        .normalized_value(quick_xml::XmlVersion::Implicit1_0)
        .map(|value| value.into_owned())
        .unwrap_or_else(|_| attribute.value.clone().into_owned());
    Some(bork_ci_core::untrusted::head(&value, MAX_MESSAGE * 2).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_pytest_report() {
        let text = crate::check::fixtures::read("pytest-junit.xml");
        let collected = parse(&text);
        let found = crate::check::fixtures::places(&collected);
        assert_eq!(
            found,
            [
                (
                    Some("tests/test_calc.py"),
                    Some(5),
                    Some("tests.test_calc.test_adds")
                ),
                (
                    Some("tests/test_calc.py"),
                    Some(14),
                    Some("tests.test_calc.TestGroup.test_raises")
                ),
            ]
        );
        assert!(collected.failures[0].message.starts_with("assert 5 == 4"));
        assert!(
            collected.failures[1]
                .message
                .starts_with("ValueError: bad <value> & \"quoted\""),
            "{}",
            collected.failures[1].message
        );
    }

    #[test]
    fn attributes_give_the_place_when_the_text_does_not() {
        let text = r#"<testsuites><testsuite file="spec/a_spec.rb"><testcase name="adds" line="7"><failure message="expected 4"/></testcase><testcase name="fine"/></testsuite></testsuites>"#;
        let collected = parse(text);
        assert_eq!(collected.failures.len(), 1);
        assert_eq!(collected.failures[0].file.as_deref(), Some("spec/a_spec.rb"));
        assert_eq!(collected.failures[0].line, Some(7));
        assert_eq!(collected.failures[0].message, "expected 4");
    }

    #[test]
    fn forged_xml_expands_no_entity_and_stops_deep() {
        let bomb = r#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]><testsuite><testcase name="t"><failure message="&lol2;">&lol2;&lol2;</failure></testcase></testsuite>"#;
        let collected = parse(bomb);
        assert_eq!(collected.failures.len(), 1);
        assert!(!collected.failures[0].message.contains("lollol"));
        let deep = "<a>".repeat(100_000) + "<testcase name=\"x\"><failure/></testcase>";
        assert!(parse(&deep).failures.is_empty());
        let external = r#"<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><testcase name="t"><failure>&e;</failure></testcase>"#;
        let collected = parse(external);
        assert!(!collected.failures[0].message.contains("root:"));
    }

    proptest::proptest! {
        #[test]
        fn junit_never_panics(text in "(<testsuite( file=\"[a-z.]{0,4}\")?>|<testcase( name=\"[a-z&;]{0,4}\")?( line=\"[0-9a]{0,3}\")?>|<failure( message=\"[a-z&#;0-9]{0,6}\")?>|</failure>|</testcase>|</testsuite>|<!\\[CDATA\\[[a-z\\]>]{0,6}\\]\\]>|&[a-z#0-9]{0,4};|[a-z:0-9 <>&\n]{0,10}){0,20}") {
            let _ = parse(&text);
        }

        #[test]
        fn junit_never_panics_on_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = parse(&String::from_utf8_lossy(&bytes));
        }
    }
}
