//! A strict reader of the Prometheus text exposition format (0.0.4), standing in for
//! `promtool check metrics`: whatever it accepts, Prometheus and node_exporter's textfile
//! collector read, and it refuses more than they do. Checked: metric and label names by
//! their regular expressions (no reserved `__` label), `# HELP` and `# TYPE` at most once
//! per family and before its samples, each family's lines together, sample names that
//! belong to their family's type (`_sum`/`_count` of a summary…), label values with only
//! the three escapes the format has (`\\`, `\"`, `\n`), values as Go parses floats, no
//! series twice, no label twice in a sample, counters named `_total` and never negative
//! (promtool's lint), and a line feed at the end of every line.
//!
//! What this module does not own: the names and meanings of redlock-run's metrics (the
//! tests check those).

use std::collections::{BTreeMap, BTreeSet};

/// One family: its header and its samples, in the order written.
#[derive(Debug, Clone)]
pub struct Family {
    pub name: String,
    pub kind: String,
    pub help: String,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The parsed exposition.
#[derive(Debug, Clone)]
pub struct Exposition {
    pub families: Vec<Family>,
}

impl Exposition {
    /// Reads `text`, failing the test with the line and the reason at the first fault.
    #[track_caller]
    pub fn parse(text: &str) -> Exposition {
        match parse(text) {
            Ok(exposition) => exposition,
            Err(err) => panic!("not a valid exposition: {err}\n--- text:\n{text}"),
        }
    }

    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.iter().find(|f| f.name == name)
    }

    /// The value of the sample `name` whose labels are exactly `labels`, if there is one.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let wanted: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.families
            .iter()
            .flat_map(|f| &f.samples)
            .find(|s| s.name == name && s.labels == wanted)
            .map(|s| s.value)
    }

    /// Every value of the `key` label among the samples of `name`.
    pub fn keys(&self, name: &str) -> BTreeSet<String> {
        self.families
            .iter()
            .flat_map(|f| &f.samples)
            .filter(|s| s.name == name)
            .filter_map(|s| s.labels.get("key").cloned())
            .collect()
    }
}

const TYPES: [&str; 5] = ["counter", "gauge", "histogram", "summary", "untyped"];

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

/// The family a sample named `sample` belongs to, given the family being written.
fn belongs(family: &Family, sample: &str) -> bool {
    let suffixes: &[&str] = match family.kind.as_str() {
        "summary" => &["", "_sum", "_count"],
        "histogram" => &["_bucket", "_sum", "_count"],
        _ => &[""],
    };
    suffixes
        .iter()
        .any(|suffix| sample == format!("{}{suffix}", family.name))
}

/// A float as Go's strconv.ParseFloat (which Prometheus uses) reads it.
fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "NaN" => return Ok(f64::NAN),
        "+Inf" | "Inf" => return Ok(f64::INFINITY),
        "-Inf" => return Ok(f64::NEG_INFINITY),
        _ => {}
    }
    let body = text.strip_prefix(['+', '-']).unwrap_or(text);
    let (mantissa, exponent) = match body.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (body, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) || !exponent_ok {
        return Err(format!("{text:?} is not a number"));
    }
    text.parse()
        .map_err(|_| format!("{text:?} is not a number"))
}

/// `{a="x",b="y"}` at the start of `text`: the labels and the rest of the line.
fn parse_labels(text: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = text.strip_prefix('{').ok_or("labels do not start with {")?;
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let (name, after) = rest.split_once('=').ok_or("a label without =")?;
        if !is_label_name(name) {
            return Err(format!("{name:?} is not a label name"));
        }
        let mut chars = after
            .strip_prefix('"')
            .ok_or("a label value without its opening quote")?
            .char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next() {
                None => return Err("a label value without its closing quote".into()),
                Some((at, '"')) => break at,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("an escape the format has not: \\{other:?}")),
                },
                Some((_, '\n')) => return Err("a raw line feed in a label value".into()),
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("the label {name} twice"));
        }
        rest = &after[1 + end + 1..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err("labels not separated by ,".into());
        }
    }
}

fn parse(text: &str) -> Result<Exposition, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the last line has no line feed".into());
    }
    let mut families: Vec<Family> = Vec::new();
    let mut seen_series = BTreeSet::new();
    for (number, line) in text.lines().enumerate() {
        let fail = |why: String| format!("line {}: {why}: {line:?}", number + 1);
        if let Some(comment) = line.strip_prefix('#') {
            let words: Vec<&str> = comment.trim_start().splitn(3, ' ').collect();
            let (keyword, name) = match words.as_slice() {
                [keyword @ ("HELP" | "TYPE"), name, ..] => (*keyword, *name),
                _ => continue, // a plain comment
            };
            if !is_metric_name(name) {
                return Err(fail(format!("{name:?} is not a metric name")));
            }
            let detail = words.get(2).copied().unwrap_or("");
            let current = families.last().filter(|f| f.name == name).is_some();
            if !current {
                if families.iter().any(|f| f.name == name) {
                    return Err(fail(format!("the family {name} is not contiguous")));
                }
                families.push(Family {
                    name: name.to_string(),
                    kind: String::new(),
                    help: String::new(),
                    samples: Vec::new(),
                });
            }
            let family = families.last_mut().unwrap();
            if !family.samples.is_empty() {
                return Err(fail(format!("{keyword} after samples of {name}")));
            }
            if keyword == "HELP" {
                if !family.help.is_empty() {
                    return Err(fail("a second HELP".into()));
                }
                family.help = detail.to_string();
            } else {
                if !family.kind.is_empty() {
                    return Err(fail("a second TYPE".into()));
                }
                if !TYPES.contains(&detail) {
                    return Err(fail(format!("{detail:?} is not a type")));
                }
                family.kind = detail.to_string();
            }
            continue;
        }
        if line.trim().is_empty() {
            return Err(fail("an empty line".into()));
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| fail("no value".into()))?;
        let name = &line[..name_end];
        if !is_metric_name(name) {
            return Err(fail(format!("{name:?} is not a metric name")));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..]).map_err(&fail)?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let rest = rest
            .strip_prefix(' ')
            .ok_or_else(|| fail("no space before the value".into()))?;
        let mut fields = rest.split(' ');
        let value = parse_value(fields.next().unwrap_or("")).map_err(&fail)?;
        if let Some(stamp) = fields.next() {
            stamp
                .parse::<i64>()
                .map_err(|_| fail(format!("{stamp:?} is not a timestamp")))?;
        }
        if fields.next().is_some() {
            return Err(fail("more after the timestamp".into()));
        }
        let family = match families.last_mut() {
            Some(family) if belongs(family, name) => family,
            _ => {
                return Err(fail(
                    "a sample outside its family (no TYPE before it, or not contiguous)".into(),
                ))
            }
        };
        if family.kind.is_empty() || family.help.is_empty() {
            return Err(fail(format!("{} has no TYPE or no HELP", family.name)));
        }
        if family.kind == "counter" {
            if !family.name.ends_with("_total") {
                return Err(fail("a counter not named _total".into()));
            }
            if value < 0.0 || value.is_nan() {
                return Err(fail("a counter below 0".into()));
            }
        }
        if !seen_series.insert((name.to_string(), labels.clone())) {
            return Err(fail("a series written twice".into()));
        }
        family.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(Exposition { families })
}

#[test]
fn the_reader_refuses_what_promtool_refuses() {
    let good = "# HELP a_total x\n# TYPE a_total counter\na_total{key=\"q\\\"\\\\\\n\"} 1.5\n";
    let parsed = Exposition::parse(good);
    assert_eq!(parsed.value("a_total", &[("key", "q\"\\\n")]), Some(1.5));
    for bad in [
        "# TYPE a_total counter\na_total 1\n",          // no HELP
        "# HELP a x\n# TYPE a gauge\na{k=\"\\t\"} 1\n", // bad escape
        "# HELP a x\n# TYPE a gauge\na 1\n# HELP b x\n# TYPE b gauge\nb 1\na 2\n", // split
        "# HELP a x\n# TYPE a gauge\na 1\na 2\n",       // twice
        "# HELP a x\n# TYPE a counter\na 1\n",          // no _total
        "# HELP a x\n# TYPE a gauge\na 1,5\n",          // not a float
        "# HELP a x\n# TYPE a gauge\na{__x=\"1\"} 1\n", // reserved
        "# HELP a x\n# TYPE a gauge\na 1",              // no line feed
        "# HELP a x\n# TYPE a gauge\n# TYPE a gauge\na 1\n", // two TYPEs
        "# HELP a x\n# TYPE a summary\na_bucket 1\n",   // not a summary's
    ] {
        assert!(parse(bad).is_err(), "accepted:\n{bad}");
    }
}
