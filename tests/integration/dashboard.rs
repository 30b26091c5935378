//! The Grafana dashboard of docs/grafana-dashboard.json (issue 33) queries only what
//! `redlock-run metrics` (and `serve`'s /metrics, the same exposition) exports: every metric
//! name in its PromQL, and every label it matches or groups by, is found in the exposition
//! of a real server after real runs. A panel over a misspelt metric would draw nothing, and
//! nobody would notice until the night it mattered.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::support::*;

const DASHBOARD: &str = "docs/grafana-dashboard.json";

/// PromQL's aggregation operators: followed by `by (…)` or `without (…)` before their
/// parenthesis, so that they cannot be told from a metric by what follows them.
const AGGREGATIONS: [&str; 12] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

/// Words of PromQL that are neither metrics nor functions.
const KEYWORDS: [&str; 5] = ["and", "or", "unless", "bool", "offset"];

/// Followed by a list of label names in parentheses.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names and the label names a PromQL expression reads. Strings, ranges
/// (`[$__rate_interval]`) and Grafana's `$variables` are skipped; an identifier followed by
/// `(` is a function; a label name is one before a matcher's operator in `{…}`, or in a
/// `by (…)` list.
fn names_in(expr: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let chars: Vec<char> = expr.chars().collect();
    let mut metrics = BTreeSet::new();
    let mut labels = BTreeSet::new();
    let ident = |at: usize| -> (String, usize) {
        let mut end = at;
        while end < chars.len()
            && (chars[end].is_ascii_alphanumeric() || chars[end] == '_' || chars[end] == ':')
        {
            end += 1;
        }
        (chars[at..end].iter().collect(), end)
    };
    let skip_string = |at: usize| -> usize {
        let quote = chars[at];
        let mut end = at + 1;
        while end < chars.len() && chars[end] != quote {
            end += if chars[end] == '\\' { 2 } else { 1 };
        }
        end + 1
    };
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        if c == '"' || c == '\'' || c == '`' {
            at = skip_string(at);
        } else if c == '[' {
            at += chars[at..]
                .iter()
                .position(|&c| c == ']')
                .unwrap_or(chars.len());
        } else if c == '$' || c.is_ascii_digit() {
            // A variable, or a number (with a duration's unit after it).
            at = ident(at + 1).1;
        } else if c == '{' {
            at += 1;
            while at < chars.len() && chars[at] != '}' {
                if chars[at] == '"' || chars[at] == '\'' {
                    at = skip_string(at);
                } else if chars[at].is_ascii_alphabetic() || chars[at] == '_' {
                    let (name, end) = ident(at);
                    labels.insert(name);
                    at = end;
                } else {
                    at += 1;
                }
            }
            at += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let (name, end) = ident(at);
            let mut next = end;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let call = chars.get(next) == Some(&'(');
            if LABEL_LISTS.contains(&name.as_str()) && call {
                let close = next + chars[next..].iter().position(|&c| c == ')').unwrap_or(0);
                let list: String = chars[next + 1..close].iter().collect();
                labels.extend(list.split(',').map(|l| l.trim().to_string()));
                at = close + 1;
                continue;
            }
            if !call && !AGGREGATIONS.contains(&name.as_str()) && !KEYWORDS.contains(&name.as_str())
            {
                metrics.insert(name);
            }
            at = end;
        } else {
            at += 1;
        }
    }
    labels.retain(|l| !l.is_empty());
    (metrics, labels)
}

/// Pairs of strings: (where, PromQL expression) or (metric, label).
type Pairs = Vec<(String, String)>;

/// Every PromQL expression of the dashboard (each panel's targets' `expr`), with where it
/// is, and the metric and label of each `label_values(METRIC, LABEL)` variable.
fn dashboard_queries() -> (Pairs, Pairs) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DASHBOARD);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let dashboard: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or("?");
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                exprs.push((format!("panel {title:?}"), expr.to_string()));
            }
        }
    }
    let mut variables = Vec::new();
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        let Some(query) = variable["definition"].as_str() else {
            continue;
        };
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| panic!("a variable's query that is not label_values: {query}"));
        let (metric, label) = inner.split_once(',').expect("label_values(METRIC, LABEL)");
        variables.push((metric.trim().to_string(), label.trim().to_string()));
    }
    (exprs, variables)
}

#[test]
fn the_promql_reader_finds_metrics_and_labels() {
    let (metrics, labels) = names_in(
        "time() - max by (key) (foo_seconds{key=~\"$key\", a!=\"b{c}\"}) / \
         sum without(reason) (rate(bar_total[$__rate_interval] offset 5m)) > bool 0 or vector(0)",
    );
    assert_eq!(
        metrics,
        BTreeSet::from(["foo_seconds".into(), "bar_total".into()])
    );
    assert_eq!(
        labels,
        BTreeSet::from(["key".into(), "a".into(), "reason".into()])
    );
}

#[test]
fn every_metric_the_dashboard_queries_is_exported() {
    let server = RedisServer::start();
    let dir = TempDir::new("dashboard");
    // A success, a run turned away busy and a holder now: every family has its samples.
    server
        .cmd()
        .args(["-k", "job", "--", "true"])
        .run()
        .assert_code(0);
    let holder = hold(server.cmd().args(["-k", "job"]), &dir, "job");
    server
        .cmd()
        .args(["-k", "job", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    let out = server.cmd().arg("metrics").run();
    out.assert_code(0);
    holder.let_go();
    holder.wait().assert_code(0);
    let exposition = Exposition::parse(&out.stdout_str());
    let samples = exposition.families.iter().flat_map(|f| &f.samples);
    let exported: BTreeSet<&str> = samples.clone().map(|s| s.name.as_str()).collect();
    let exported_labels: BTreeSet<&str> = samples
        .flat_map(|s| s.labels.keys())
        .map(String::as_str)
        .collect();

    let (exprs, variables) = dashboard_queries();
    assert!(
        exprs.len() >= 10,
        "only {} queries in {DASHBOARD}",
        exprs.len()
    );
    let mut unknown = Vec::new();
    for (place, expr) in &exprs {
        let (metrics, labels) = names_in(expr);
        assert!(!metrics.is_empty(), "{place} queries no metric: {expr}");
        for metric in metrics.iter().filter(|m| !exported.contains(m.as_str())) {
            unknown.push(format!("{place}: metric {metric} in {expr}"));
        }
        for label in labels
            .iter()
            .filter(|l| !exported_labels.contains(l.as_str()))
        {
            unknown.push(format!("{place}: label {label} in {expr}"));
        }
    }
    for (metric, label) in &variables {
        if !exported.contains(metric.as_str()) || !exported_labels.contains(label.as_str()) {
            unknown.push(format!("variable: label_values({metric}, {label})"));
        }
    }
    assert!(
        unknown.is_empty(),
        "{DASHBOARD} queries what `redlock-run metrics` does not export:\n{}\n\
         exported: {exported:?}, labels {exported_labels:?}",
        unknown.join("\n")
    );
}
