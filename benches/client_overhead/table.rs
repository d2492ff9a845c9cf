//! The printed table: one row per metric, a column per client, each cell the median and its
//! ratio to the row's reference column.

use crate::clients::{Kind, ALL};

pub(crate) struct Row {
    metric: String,
    cells: [Option<f64>; 4],
    reference: Option<Kind>,
    decimals: usize,
    budget: String,
    ok: Option<bool>,
    pub notes: Vec<String>,
}

impl Row {
    pub(crate) fn new(
        metric: &str,
        cells: [Option<f64>; 4],
        reference: Kind,
        decimals: usize,
    ) -> Row {
        Row {
            metric: metric.to_owned(),
            cells,
            reference: Some(reference),
            decimals,
            budget: String::new(),
            ok: None,
            notes: Vec::new(),
        }
    }

    /// The budget this row is checked against, and whether mcp-resume meets it.
    pub(crate) fn budget(mut self, budget: &str, ok: Option<bool>) -> Row {
        self.budget = budget.to_owned();
        self.ok = ok;
        self
    }

    pub(crate) fn no_ratio(mut self) -> Row {
        self.reference = None;
        self
    }

    fn cell(&self, i: usize) -> String {
        let Some(v) = self.cells[i] else {
            return "-".to_owned();
        };
        let value = format!("{v:.*}", self.decimals);
        match self.reference.and_then(|r| self.cells[r.column()]) {
            Some(r) if r != 0.0 => format!("{value} ({:.2})", v / r),
            _ => value,
        }
    }
}

#[derive(Default)]
pub(crate) struct Table {
    rows: Vec<Row>,
}

impl Table {
    pub(crate) fn push(&mut self, row: Row) {
        self.rows.push(row);
    }

    pub(crate) fn render(&self) -> String {
        let width = self
            .rows
            .iter()
            .map(|r| r.metric.chars().count())
            .max()
            .unwrap_or(0)
            .max("metric (ratio to the ref. column)".len());
        let mut out = format!("{:<width$}", "metric (ratio to the ref. column)");
        for k in ALL {
            out.push_str(&format!("  {:>17}", k.label()));
        }
        out.push_str("  ref.         budget (mcp-resume)\n");
        for r in &self.rows {
            out.push_str(&format!("{:<width$}", r.metric));
            for i in 0..ALL.len() {
                out.push_str(&format!("  {:>17}", r.cell(i)));
            }
            let reference = r.reference.map_or("-", Kind::label);
            out.push_str(&format!("  {reference:<12} {}", r.budget));
            match r.ok {
                Some(true) => out.push_str("  met"),
                Some(false) => out.push_str("  NOT MET"),
                None => {}
            }
            out.push('\n');
            for n in &r.notes {
                out.push_str(&format!("    {n}\n"));
            }
        }
        out
    }
}
