//! The Containerfile subset cozyplane's images are written in, parsed.
//!
//! Only what an image built `FROM scratch` from a staged root filesystem needs, read the way
//! `docker build` reads it, so that a CI's docker and this crate build the same image from
//! the same file: `FROM scratch` (once, first), `ARG`, `COPY <src> <dest>`, `USER`,
//! `ENV k=v…`, `LABEL k=v…`, `WORKDIR <absolute path>`, and `ENTRYPOINT`/`CMD` in exec (JSON)
//! form. Anything else — another instruction, a flag (`COPY --chown`), the shell form of
//! `ENTRYPOINT`/`CMD` (a scratch image may have no shell), a second `FROM` — is refused with
//! its line number instead of being built differently from docker.

use std::collections::BTreeMap;

/// Why a Containerfile was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParseError {
    /// An instruction outside the subset.
    #[error(
        "line {line}: {instruction} is not supported by cozyplane-images (only FROM scratch, ARG, COPY, \
         USER, ENV, LABEL, WORKDIR, ENTRYPOINT, CMD)"
    )]
    Unsupported {
        /// 1-based line where the instruction starts.
        line: usize,
        /// The instruction's keyword as written.
        instruction: String,
    },
    /// A supported instruction written in a form this builder does not take.
    #[error("line {line}: {message}")]
    Invalid {
        /// 1-based line where the instruction starts.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// One instruction after `FROM scratch`, with the line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// 1-based.
    pub number: usize,
    /// What it says.
    pub instruction: Instruction,
}

/// The instructions of the subset (`FROM scratch` is checked and implied).
#[derive(Debug, Clone, PartialEq)]
pub enum Instruction {
    /// `ARG NAME[=default]`: a build argument, substituted in later instructions.
    Arg {
        /// The argument's name.
        name: String,
        /// Its value when the build passes none.
        default: Option<Word>,
    },
    /// `COPY <src> <dest>`: one layer with `src` (relative to the context) at `dest`.
    Copy {
        /// Path inside the build context.
        src: Word,
        /// Path inside the image.
        dest: Word,
    },
    /// `USER <user>[:<group>]`.
    User(Word),
    /// `ENV k=v…`.
    Env(Vec<(String, Word)>),
    /// `LABEL k=v…`.
    Label(Vec<(String, Word)>),
    /// `WORKDIR <absolute path>`.
    Workdir(Word),
    /// `ENTRYPOINT ["…", …]`.
    Entrypoint(Vec<String>),
    /// `CMD ["…", …]`.
    Cmd(Vec<String>),
}

/// A word of an instruction after quote removal: literal text and `$NAME`/`${NAME}`
/// references, expanded against the build's variables when the instruction is applied.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Word(Vec<Part>);

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Lit(String),
    Var(String),
}

impl Word {
    /// The word with every reference replaced by its value; an unset variable is empty, as in
    /// docker.
    pub fn expand(&self, vars: &BTreeMap<String, String>) -> String {
        let mut s = String::new();
        for p in &self.0 {
            match p {
                Part::Lit(l) => s.push_str(l),
                Part::Var(v) => s.push_str(vars.get(v).map_or("", String::as_str)),
            }
        }
        s
    }

    fn push_char(&mut self, c: char) {
        if let Some(Part::Lit(l)) = self.0.last_mut() {
            l.push(c);
        } else {
            self.0.push(Part::Lit(c.to_string()));
        }
    }

    /// Splits `key=value` at the first `=`; the key must be literal.
    fn key_value(mut self, line: usize) -> Result<(String, Word), ParseError> {
        let invalid = |w: &Word| ParseError::Invalid {
            line,
            message: format!("expected KEY=VALUE, found {:?}", w.expand(&BTreeMap::new())),
        };
        let Some(Part::Lit(first)) = self.0.first() else {
            return Err(invalid(&self));
        };
        let Some((key, rest)) = first.split_once('=') else {
            return Err(invalid(&self));
        };
        if key.is_empty() {
            return Err(invalid(&self));
        }
        let key = key.to_string();
        let rest = rest.to_string();
        if rest.is_empty() {
            self.0.remove(0);
        } else {
            self.0[0] = Part::Lit(rest);
        }
        Ok((key, self))
    }
}

/// Parses a Containerfile of the subset; the instructions after `FROM scratch`, in order.
pub fn parse(text: &str) -> Result<Vec<Line>, ParseError> {
    let mut out = Vec::new();
    let mut seen_from = false;
    for (number, logical) in logical_lines(text) {
        let (keyword, args) = match logical.trim().split_once(char::is_whitespace) {
            Some((k, a)) => (k, a.trim()),
            None => (logical.trim(), ""),
        };
        let upper = keyword.to_ascii_uppercase();
        let invalid = |message: String| ParseError::Invalid {
            line: number,
            message,
        };
        if upper == "FROM" {
            if seen_from {
                return Err(invalid(
                    "a second FROM (multi-stage builds are not supported)".into(),
                ));
            }
            if args != "scratch" {
                return Err(invalid(format!("FROM {args}: only FROM scratch is supported")));
            }
            seen_from = true;
            continue;
        }
        if !SUPPORTED.contains(&upper.as_str()) {
            return Err(ParseError::Unsupported {
                line: number,
                instruction: keyword.to_string(),
            });
        }
        if !seen_from {
            return Err(invalid(format!("{keyword} before FROM scratch")));
        }
        let instruction = match upper.as_str() {
            "ENTRYPOINT" | "CMD" => {
                let argv: Vec<String> = if args.starts_with('[') {
                    serde_json::from_str(args)
                        .map_err(|e| invalid(format!("{keyword}: not a JSON array of strings: {e}")))?
                } else {
                    return Err(invalid(format!(
                        "{keyword} in shell form: write the exec form, {keyword} [\"/path\", \"arg\"]"
                    )));
                };
                if upper == "CMD" {
                    Instruction::Cmd(argv)
                } else {
                    Instruction::Entrypoint(argv)
                }
            }
            _ => {
                if args.starts_with("--") {
                    return Err(invalid(format!("{keyword} with flags ({args}) is not supported")));
                }
                let mut words = words(args, number)?;
                match upper.as_str() {
                    "ARG" => {
                        let [word] = <[Word; 1]>::try_from(words)
                            .map_err(|_| invalid("ARG takes one NAME[=default]".into()))?;
                        match word.clone().key_value(number) {
                            Ok((name, default)) => Instruction::Arg {
                                name,
                                default: Some(default),
                            },
                            Err(_) => {
                                let name = word.expand(&BTreeMap::new());
                                if name.is_empty() || word.0.iter().any(|p| matches!(p, Part::Var(_))) {
                                    return Err(invalid("ARG takes one NAME[=default]".into()));
                                }
                                Instruction::Arg { name, default: None }
                            }
                        }
                    }
                    "COPY" => {
                        if words.len() != 2 {
                            return Err(invalid(
                                "COPY takes exactly one source and one destination".into(),
                            ));
                        }
                        let dest = words.pop().unwrap_or_default();
                        let src = words.pop().unwrap_or_default();
                        Instruction::Copy { src, dest }
                    }
                    "USER" | "WORKDIR" => {
                        let [word] = <[Word; 1]>::try_from(words)
                            .map_err(|_| invalid(format!("{keyword} takes one argument")))?;
                        if upper == "USER" {
                            Instruction::User(word)
                        } else {
                            Instruction::Workdir(word)
                        }
                    }
                    "ENV" | "LABEL" => {
                        if words.is_empty() {
                            return Err(invalid(format!("{keyword} without KEY=VALUE")));
                        }
                        let pairs = words
                            .into_iter()
                            .map(|w| w.key_value(number))
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(|e| match e {
                                ParseError::Invalid { message, .. } => invalid(format!(
                                    "{keyword}: {message} (the legacy `{keyword} KEY VALUE` form is not supported)"
                                )),
                                other => other,
                            })?;
                        if upper == "ENV" {
                            Instruction::Env(pairs)
                        } else {
                            Instruction::Label(pairs)
                        }
                    }
                    _ => unreachable!("every keyword of SUPPORTED is handled"),
                }
            }
        };
        out.push(Line { number, instruction });
    }
    if !seen_from {
        return Err(ParseError::Invalid {
            line: 1,
            message: "no FROM scratch".into(),
        });
    }
    Ok(out)
}

const SUPPORTED: &[&str] = &[
    "ARG",
    "COPY",
    "USER",
    "ENV",
    "LABEL",
    "WORKDIR",
    "ENTRYPOINT",
    "CMD",
];

/// Instructions with the line each starts on: comment lines and blank lines dropped,
/// continuations (a trailing `\`) joined as docker joins them (the backslash and newline
/// removed, nothing added; comment lines inside a continuation skipped).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        if trimmed.starts_with('#') || (current.is_none() && trimmed.is_empty()) {
            continue;
        }
        let body = raw.trim_end();
        let (content, continues) = match body.strip_suffix('\\') {
            Some(c) => (c, true),
            None => (body, false),
        };
        let (start, mut acc) = current.take().unwrap_or((i + 1, String::new()));
        acc.push_str(content);
        if continues {
            current = Some((start, acc));
        } else {
            out.push((start, acc));
        }
    }
    if let Some(last) = current {
        out.push(last);
    }
    out
}

/// Splits an instruction's arguments into words: whitespace separates, `"…"` and `'…'`
/// quote, `\` escapes (inside double quotes only before `"`, `\` and `$`), and `$NAME` or
/// `${NAME}` outside single quotes refers to a variable. `${NAME:-…}` and the other
/// modifiers are refused: the images need none.
fn words(s: &str, line: usize) -> Result<Vec<Word>, ParseError> {
    let invalid = |message: &str| ParseError::Invalid {
        line,
        message: message.to_string(),
    };
    let mut out = Vec::new();
    let mut word: Option<Word> = None;
    let mut chars = s.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => {
                if let Some(w) = word.take() {
                    out.push(w);
                }
                continue;
            }
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '\\') => {
                let next = chars.next().ok_or_else(|| invalid("a trailing backslash"))?;
                word.get_or_insert_with(Word::default).push_char(next);
            }
            (Some('"'), '\\') if matches!(chars.peek(), Some('"' | '\\' | '$')) => {
                let next = chars.next().unwrap_or('\\');
                word.get_or_insert_with(Word::default).push_char(next);
            }
            (None | Some('"'), '$') => {
                let name = if chars.peek() == Some(&'{') {
                    chars.next();
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) if c.is_ascii_alphanumeric() || c == '_' => name.push(c),
                            _ => return Err(invalid("only ${NAME} and $NAME references are supported")),
                        }
                    }
                    name
                } else {
                    let mut name = String::new();
                    while let Some(&c) = chars.peek() {
                        if c.is_ascii_alphanumeric() || c == '_' {
                            name.push(c);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                    name
                };
                let w = word.get_or_insert_with(Word::default);
                if name.is_empty() {
                    w.push_char('$');
                } else {
                    w.0.push(Part::Var(name));
                }
            }
            (_, c) => word.get_or_insert_with(Word::default).push_char(c),
        }
        // An opening quote starts a word even if it stays empty (`KEY=""`).
        word.get_or_insert_with(Word::default);
    }
    if quote.is_some() {
        return Err(invalid("an unterminated quote"));
    }
    if let Some(w) = word {
        out.push(w);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn reads_the_subset() {
        let text = "# a comment\n\
                    FROM scratch\n\
                    ARG VERSION\n\
                    ARG KIND=plain\n\
                    COPY rootfs/ /\n\
                    \n\
                    USER 65532:65532\n\
                    ENV PATH=/usr/bin A=\"x y\"\n\
                    LABEL a.b=\"v-${VERSION}\" \\\n\
                    # a comment inside a continuation\n\
                    \x20     c='$KIND' d=$KIND\n\
                    WORKDIR /\n\
                    ENTRYPOINT [\"/usr/bin/x\"]\n\
                    CMD [\"--help\"]\n";
        let lines = parse(text).unwrap();
        let numbers: Vec<usize> = lines.iter().map(|l| l.number).collect();
        assert_eq!(numbers, [3, 4, 5, 7, 8, 9, 12, 13, 14]);
        let v = vars(&[("VERSION", "1.2"), ("KIND", "k")]);
        let Instruction::Label(labels) = &lines[5].instruction else {
            panic!("{:?}", lines[5])
        };
        let labels: Vec<(String, String)> = labels.iter().map(|(k, w)| (k.clone(), w.expand(&v))).collect();
        assert_eq!(
            labels,
            [
                ("a.b".into(), "v-1.2".into()),
                ("c".into(), "$KIND".into()),
                ("d".into(), "k".into())
            ]
        );
        let Instruction::Env(env) = &lines[4].instruction else {
            panic!()
        };
        assert_eq!(env[1].0, "A");
        assert_eq!(env[1].1.expand(&v), "x y");
        assert_eq!(
            lines[0].instruction,
            Instruction::Arg {
                name: "VERSION".into(),
                default: None
            }
        );
        let Instruction::Arg { default: Some(d), .. } = &lines[1].instruction else {
            panic!()
        };
        assert_eq!(d.expand(&v), "plain");
        assert_eq!(
            lines[7].instruction,
            Instruction::Entrypoint(vec!["/usr/bin/x".into()])
        );
        assert_eq!(lines[8].instruction, Instruction::Cmd(vec!["--help".into()]));
    }

    #[test]
    fn refuses_an_unsupported_instruction_with_its_line() {
        let text = "FROM scratch\nCOPY rootfs/ /\n# RUN in a comment is fine\n\nRUN apt-get install nft\n";
        let e = parse(text).unwrap_err();
        assert_eq!(
            e,
            ParseError::Unsupported {
                line: 5,
                instruction: "RUN".into()
            }
        );
        assert!(e.to_string().starts_with("line 5: RUN is not supported"), "{e}");
    }

    #[test]
    fn refuses_forms_docker_would_build_differently() {
        for (text, line, needle) in [
            ("FROM debian:12\n", 1, "only FROM scratch"),
            ("COPY a /\nFROM scratch\n", 1, "before FROM"),
            ("FROM scratch\nFROM scratch\n", 2, "second FROM"),
            ("FROM scratch\n\nCOPY --chown=1:1 a /\n", 3, "flags"),
            ("FROM scratch\nCOPY a b /\n", 2, "exactly one source"),
            ("FROM scratch\nENTRYPOINT /bin/x --y\n", 2, "shell form"),
            ("FROM scratch\nCMD [\"a\", 1]\n", 2, "JSON array"),
            ("FROM scratch\nENV PATH /bin\n", 2, "legacy"),
            ("FROM scratch\nLABEL a=\"${X:-y}\"\n", 2, "${NAME}"),
            ("FROM scratch\nLABEL a=\"b\n", 2, "unterminated"),
            ("# only a comment\n", 1, "no FROM"),
        ] {
            match parse(text) {
                Err(ParseError::Invalid { line: l, message }) => {
                    assert_eq!(l, line, "{text:?}: {message}");
                    assert!(message.contains(needle), "{text:?}: {message}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_repository_containerfiles_parse() {
        // The two images' own definitions must stay inside the subset.
        for dir in ["apiserver", "agent"] {
            let path = format!("{}/{dir}/Containerfile", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            let lines = parse(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert!(
                lines
                    .iter()
                    .any(|l| matches!(l.instruction, Instruction::Entrypoint(_))),
                "{path}"
            );
        }
    }
}
