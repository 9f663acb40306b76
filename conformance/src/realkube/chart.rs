//! Renders the chart's own RBAC and ServiceAccount templates exactly as Helm would with the
//! chart's default values, so the real control plane runs with exactly the chart's RBAC.
//!
//! Helm is not available to the tests, so this is a renderer for the few Go-template constructs
//! those templates use — `{{ .Release.* }}`, `{{ .Chart.* }}`, `{{ .Values.* }}`,
//! `{{ include "<define>" . | nindent N }}`, `{{ if <cond> }}`/`{{ else }}`/`{{ end }}` with
//! `<cond>` a value or `eq <value> "<string>"`, `{{/* comments */}}` and the `{{-`/`-}}`
//! whitespace trimming — and it refuses everything else with an error naming the construct: a
//! template that grows a new construct fails the tier instead of being rendered wrongly.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

/// The release the tier installs: its namespace and name.
pub const RELEASE_NAMESPACE: &str = "cozy-system";
/// The release name (only used in labels).
pub const RELEASE_NAME: &str = "cozyplane";

/// The templates the tier applies, in order.
pub const TEMPLATES: &[&str] = &["serviceaccounts.yaml", "apiserver-rbac.yaml", "tenant-rbac.yaml"];

/// Why a template could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A construct this renderer does not know.
    #[error("{file}: template construct not supported by the test renderer: {{{{{action}}}}}")]
    Unsupported {
        /// The template file.
        file: String,
        /// The action's text.
        action: String,
    },
    /// Unbalanced `if`/`end`, an unterminated action, an unknown define.
    #[error("{file}: {message}")]
    Malformed {
        /// The template file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A chart file could not be read or parsed.
    #[error("reading {0}: {1}")]
    Read(String, String),
}

#[derive(Clone, Debug)]
enum Token {
    Text(String),
    Action(String),
}

/// Splits a template into text and actions, applying `{{-` and `-}}` trimming.
fn tokenize(file: &str, src: &str) -> Result<Vec<Token>, Error> {
    let mut out = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while let Some(start) = rest.find("{{") {
        let mut text = rest[..start].to_string();
        if trim_next {
            text = text.trim_start().to_string();
        }
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| Error::Malformed {
            file: file.into(),
            message: "unterminated {{".into(),
        })?;
        let mut action = &after[..end];
        if let Some(a) = action.strip_prefix('-') {
            text = text.trim_end().to_string();
            action = a;
        }
        trim_next = false;
        if let Some(a) = action.strip_suffix('-') {
            trim_next = true;
            action = a;
        }
        out.push(Token::Text(text));
        out.push(Token::Action(action.trim().to_string()));
        rest = &after[end + 2..];
    }
    let text = if trim_next { rest.trim_start() } else { rest };
    out.push(Token::Text(text.to_string()));
    Ok(out)
}

/// The chart: values, `Chart.yaml` and the helpers' defines.
pub struct Chart {
    values: Value,
    chart: Value,
    defines: HashMap<String, Vec<Token>>,
    dir: std::path::PathBuf,
}

fn read_yaml(path: &Path) -> Result<Value, Error> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::Read(path.display().to_string(), e.to_string()))?;
    serde_norway::from_str(&text).map_err(|e| Error::Read(path.display().to_string(), e.to_string()))
}

fn opens_block(action: &str) -> bool {
    ["if ", "with ", "range ", "define "]
        .iter()
        .any(|k| action.starts_with(k))
}

impl Chart {
    /// Loads the chart in `dir` (`charts/cozyplane`).
    pub fn load(dir: &Path) -> Result<Self, Error> {
        let values = read_yaml(&dir.join("values.yaml"))?;
        let chart = read_yaml(&dir.join("Chart.yaml"))?;
        let helpers_path = dir.join("templates/_helpers.tpl");
        let helpers = std::fs::read_to_string(&helpers_path)
            .map_err(|e| Error::Read(helpers_path.display().to_string(), e.to_string()))?;
        let mut defines = HashMap::new();
        let mut tokens = tokenize("_helpers.tpl", &helpers)?.into_iter();
        while let Some(t) = tokens.next() {
            let Token::Action(a) = t else { continue };
            let Some(name) = a.strip_prefix("define ") else {
                continue;
            };
            let name = name.trim().trim_matches('"').to_string();
            let mut depth = 0usize;
            let mut body = Vec::new();
            for t in tokens.by_ref() {
                if let Token::Action(a) = &t {
                    if opens_block(a) {
                        depth += 1;
                    } else if a == "end" {
                        if depth == 0 {
                            break;
                        }
                        depth -= 1;
                    }
                }
                body.push(t);
            }
            defines.insert(name, body);
        }
        Ok(Self {
            values,
            chart,
            defines,
            dir: dir.to_path_buf(),
        })
    }

    /// The value of a `.Release.*`, `.Chart.*` or `.Values.*` path.
    fn lookup(&self, file: &str, path: &str) -> Result<Value, Error> {
        let unsupported = || Error::Unsupported {
            file: file.into(),
            action: path.into(),
        };
        let mut parts = path.strip_prefix('.').ok_or_else(unsupported)?.split('.');
        match parts.next() {
            Some("Release") => Ok(Value::String(
                match parts.next() {
                    Some("Namespace") => RELEASE_NAMESPACE,
                    Some("Name") => RELEASE_NAME,
                    Some("Service") => "Helm",
                    _ => return Err(unsupported()),
                }
                .into(),
            )),
            Some("Chart") => {
                let key = match parts.next() {
                    Some("Name") => "name",
                    Some("Version") => "version",
                    Some("AppVersion") => "appVersion",
                    _ => return Err(unsupported()),
                };
                self.chart.get(key).cloned().ok_or_else(unsupported)
            }
            Some("Values") => {
                let mut v = &self.values;
                for p in parts {
                    // Helm renders a missing value as empty (and falsy).
                    v = match v.get(p) {
                        Some(x) => x,
                        None => return Ok(Value::Null),
                    };
                }
                Ok(v.clone())
            }
            _ => Err(unsupported()),
        }
    }

    fn condition(&self, file: &str, cond: &str) -> Result<bool, Error> {
        let words: Vec<&str> = cond.split_whitespace().collect();
        match words.as_slice() {
            [path] if path.starts_with('.') => Ok(truthy(&self.lookup(file, path)?)),
            ["eq", path, lit] if lit.starts_with('"') && lit.ends_with('"') && lit.len() >= 2 => {
                Ok(self.lookup(file, path)? == Value::String(lit[1..lit.len() - 1].to_string()))
            }
            _ => Err(Error::Unsupported {
                file: file.into(),
                action: format!("if {cond}"),
            }),
        }
    }

    fn action(&self, file: &str, a: &str) -> Result<String, Error> {
        let words: Vec<&str> = a.split_whitespace().collect();
        match words.as_slice() {
            [path] if path.starts_with('.') => Ok(scalar(&self.lookup(file, path)?)),
            ["include", name, ".", "|", "nindent", n] => {
                let n: usize = n.parse().map_err(|_| Error::Unsupported {
                    file: file.into(),
                    action: a.into(),
                })?;
                let body = self
                    .defines
                    .get(name.trim_matches('"'))
                    .ok_or_else(|| Error::Malformed {
                        file: file.into(),
                        message: format!("no define {name}"),
                    })?;
                let text = self.render_tokens(&format!("define {name}"), body)?;
                let pad = " ".repeat(n);
                Ok(text.lines().map(|l| format!("\n{pad}{l}")).collect())
            }
            _ => Err(Error::Unsupported {
                file: file.into(),
                action: a.into(),
            }),
        }
    }

    fn render_tokens(&self, file: &str, tokens: &[Token]) -> Result<String, Error> {
        // A stack of (this branch is emitted, some branch of this `if` was taken).
        let mut stack: Vec<(bool, bool)> = Vec::new();
        let mut out = String::new();
        let live = |s: &[(bool, bool)]| s.iter().all(|(on, _)| *on);
        for t in tokens {
            match t {
                Token::Text(s) => {
                    if live(&stack) {
                        out.push_str(s);
                    }
                }
                Token::Action(a) if a.starts_with("/*") && a.ends_with("*/") => {}
                Token::Action(a) if a.starts_with("if ") => {
                    // Conditions inside a dead branch are not evaluated (Helm does not either).
                    let on = live(&stack) && self.condition(file, &a[3..])?;
                    stack.push((on, on));
                }
                Token::Action(a) if a == "else" => {
                    let (_, taken) = stack.pop().ok_or_else(|| Error::Malformed {
                        file: file.into(),
                        message: "else without if".into(),
                    })?;
                    stack.push((!taken, true));
                }
                Token::Action(a) if a == "end" => {
                    stack.pop().ok_or_else(|| Error::Malformed {
                        file: file.into(),
                        message: "end without if".into(),
                    })?;
                }
                Token::Action(a) => {
                    if live(&stack) {
                        out.push_str(&self.action(file, a)?);
                    } else if !(a.starts_with('.') || a.starts_with("include ")) {
                        // Even a dead branch must only hold known constructs.
                        return Err(Error::Unsupported {
                            file: file.into(),
                            action: a.clone(),
                        });
                    }
                }
            }
        }
        if !stack.is_empty() {
            return Err(Error::Malformed {
                file: file.into(),
                message: "if without end".into(),
            });
        }
        Ok(out)
    }

    /// Renders one template of `templates/`.
    pub fn render(&self, template: &str) -> Result<String, Error> {
        let path = self.dir.join("templates").join(template);
        let src = std::fs::read_to_string(&path)
            .map_err(|e| Error::Read(path.display().to_string(), e.to_string()))?;
        self.render_tokens(template, &tokenize(template, &src)?)
    }

    /// [`TEMPLATES`] rendered and joined into one multi-document YAML stream.
    pub fn render_rbac(&self) -> Result<String, Error> {
        let mut docs = Vec::new();
        for t in TEMPLATES {
            docs.push(self.render(t)?);
        }
        Ok(docs.join("\n---\n"))
    }
}

/// Go templates' truth: false, 0, null and empty strings, lists and maps are false.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/cozyplane")).expect("chart loads")
    }

    #[test]
    fn renders_the_rbac_templates_without_template_syntax() {
        let out = chart().render_rbac().expect("renders");
        assert!(!out.contains("{{"), "{out}");
        assert!(out.contains("namespace: cozy-system"), "{out}");
        assert!(out.contains("app.kubernetes.io/part-of: cozyplane"), "{out}");
        // Every document parses as YAML.
        for doc in out.split("\n---\n") {
            let _: Value = serde_norway::from_str(doc).unwrap_or_else(|e| panic!("{e}: {doc}"));
        }
    }

    #[test]
    fn unknown_constructs_fail_loudly() {
        let c = chart();
        let toks = tokenize("t", "a: {{ .Values.x | quote }}\n").unwrap();
        let err = c.render_tokens("t", &toks).unwrap_err().to_string();
        assert!(err.contains("not supported"), "{err}");
        let toks = tokenize("t", "{{- range .Values.x }}\n{{- end }}\n").unwrap();
        assert!(c.render_tokens("t", &toks).is_err());
    }

    #[test]
    fn trims_and_branches_like_helm() {
        let c = chart();
        let toks = tokenize(
            "t",
            "a:\n  {{- if eq .Values.apiService.managedBy \"server\" }}\n  - x\n  {{- else }}\n  - y\n  {{- end }}\nb: {{ .Release.Namespace }}\n",
        )
        .unwrap();
        assert_eq!(
            c.render_tokens("t", &toks).unwrap(),
            "a:\n  - x\nb: cozy-system\n"
        );
    }
}
