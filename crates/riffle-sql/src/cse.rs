//! Common subexpressions of a `SELECT`: a call written more than once in its `WHERE` and its
//! projection (`CASE WHEN lower(channel) = 'apple' .. WHEN lower(channel) = 'google' ..`,
//! `REGEXP_EXTRACT(url, ..)` in both the `WHERE` and a column, as Nexmark's q21 does) is
//! computed once per row, as a column of a projection below its uses, as Flink's code
//! generation reuses such calls.
//!
//! A call is taken out only when computing it for every row cannot fail where the query would
//! not: one of its occurrences is evaluated for every row at that point (not under a `CASE`'s
//! later branch, the right side of `AND`/`OR`, `COALESCE`'s later arguments), so an error of
//! the call is an error of the query anyway. It is computed before the `WHERE` when the `WHERE`
//! evaluates it for every row, after it when only the projection does. Only deterministic
//! calls are taken out (the planner says which: `NOW()`, `RAND()` and functions registered
//! from Rust are not).

use std::collections::HashMap;

use sqlparser::ast;

/// A call's occurrences in one expression list.
#[derive(Default)]
struct Seen {
    /// How many times it is written.
    count: usize,
    /// Whether one occurrence is evaluated for every row.
    always: bool,
}

/// A call computed once: the name of the column holding its value, the call, and whether it
/// is computed before the `WHERE` (or after it, for the projection only).
pub(crate) struct Shared {
    pub name: String,
    pub call: ast::Expr,
    pub before_where: bool,
}

/// Takes the calls to compute once out of `condition` and `items` (the projection's
/// expressions), replacing each occurrence with the column that will hold its value. Longest
/// first: a call inside another taken out is taken out again only if it repeats outside it.
pub(crate) fn take_repeated_calls(
    condition: &mut Option<ast::Expr>,
    items: &mut [ast::Expr],
    candidate: &dyn Fn(&ast::Expr) -> bool,
) -> Vec<Shared> {
    let mut shared: Vec<Shared> = Vec::new();
    let mut tried: Vec<String> = Vec::new();
    loop {
        let in_where = occurrences(condition.iter(), candidate);
        let in_items = occurrences(items.iter(), candidate);
        let mut calls: Vec<(&String, bool)> = Vec::new();
        for (key, seen) in &in_where {
            let total = seen.count + in_items.get(key).map_or(0, |s| s.count);
            // (Before the WHERE, no column computed after it can be read.)
            if seen.always && total >= 2 && !key.contains('$') {
                calls.push((key, true));
            }
        }
        for (key, seen) in &in_items {
            if seen.always && seen.count >= 2 && !in_where.get(key).is_some_and(|s| s.always) {
                calls.push((key, false));
            }
        }
        calls.retain(|(key, _)| !tried.contains(key));
        calls.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
        let Some((key, before_where)) = calls.first().map(|(k, f)| ((*k).clone(), *f)) else {
            break;
        };
        tried.push(key.clone());
        let call = find(condition.iter().chain(items.iter()), &key).expect("a call just counted");
        let name = format!("$cse{}", shared.len());
        let marker = ast::Expr::Identifier(ast::Ident::new(&name));
        if before_where && let Some(condition) = condition.as_mut() {
            replace(condition, &key, &marker);
        }
        for item in items.iter_mut() {
            replace(item, &key, &marker);
        }
        shared.push(Shared {
            name,
            call,
            before_where,
        });
    }
    shared
}

/// Every candidate call of `exprs` by its text.
fn occurrences<'a>(
    exprs: impl Iterator<Item = &'a ast::Expr>,
    candidate: &dyn Fn(&ast::Expr) -> bool,
) -> HashMap<String, Seen> {
    let mut seen = HashMap::new();
    for expr in exprs {
        walk(expr, true, candidate, &mut seen);
    }
    seen
}

/// Counts the calls of `expr`; `always`: whether `expr` is evaluated for every row.
fn walk(
    expr: &ast::Expr,
    always: bool,
    candidate: &dyn Fn(&ast::Expr) -> bool,
    seen: &mut HashMap<String, Seen>,
) {
    use ast::Expr as E;
    if matches!(expr, E::Function(_)) && candidate(expr) {
        let entry = seen.entry(expr.to_string()).or_default();
        entry.count += 1;
        entry.always |= always;
    }
    let mut go = |e: &ast::Expr, always: bool| walk(e, always, candidate, seen);
    match expr {
        E::BinaryOp { left, op, right } => {
            go(left, always);
            let lazy = matches!(op, ast::BinaryOperator::And | ast::BinaryOperator::Or);
            go(right, always && !lazy);
        }
        E::UnaryOp { expr, .. }
        | E::Nested(expr)
        | E::IsNull(expr)
        | E::IsNotNull(expr)
        | E::IsTrue(expr)
        | E::IsFalse(expr)
        | E::IsNotTrue(expr)
        | E::IsNotFalse(expr)
        | E::IsUnknown(expr)
        | E::Cast { expr, .. } => go(expr, always),
        E::IsDistinctFrom(a, b) | E::IsNotDistinctFrom(a, b) => {
            go(a, always);
            go(b, always);
        }
        E::In { expr, target, .. } => {
            go(expr, always);
            if let ast::InTarget::List(list) = target {
                // (A match may end the list's evaluation.)
                list.iter().for_each(|e| go(e, false));
            }
        }
        E::Between {
            expr, low, high, ..
        } => {
            go(expr, always);
            go(low, always);
            go(high, always);
        }
        E::Like { expr, pattern, .. }
        | E::ILike { expr, pattern, .. }
        | E::SimilarTo { expr, pattern, .. } => {
            go(expr, always);
            go(pattern, always);
        }
        E::Case {
            operand,
            conditions,
            else_result,
            ..
        } => {
            if let Some(operand) = operand {
                go(operand, always);
            }
            for (i, when) in conditions.iter().enumerate() {
                go(&when.condition, always && i == 0);
                go(&when.result, false);
            }
            if let Some(else_result) = else_result {
                go(else_result, false);
            }
        }
        E::Function(f) => {
            let name = f.name.to_string().to_ascii_uppercase();
            // Functions that evaluate their later arguments only for some rows.
            let lazy = matches!(name.as_str(), "COALESCE" | "IF" | "IFNULL" | "NVL" | "NVL2");
            if let ast::FunctionArguments::List(list) = &f.args {
                for (i, arg) in list.args.iter().enumerate() {
                    if let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) = arg {
                        go(e, always && !(lazy && i > 0));
                    }
                }
            }
        }
        // Anything else is not looked into: its calls are not counted.
        _ => {}
    }
}

/// The first call of `exprs` whose text is `key`.
fn find<'a>(exprs: impl Iterator<Item = &'a ast::Expr>, key: &str) -> Option<ast::Expr> {
    let mut found = None;
    for expr in exprs {
        let _ = ast::visit_expressions(expr, |e| {
            if matches!(e, ast::Expr::Function(_)) && e.to_string() == key {
                found = Some(e.clone());
                return std::ops::ControlFlow::Break(());
            }
            std::ops::ControlFlow::Continue(())
        });
        if found.is_some() {
            break;
        }
    }
    found
}

/// Replaces every call of `expr` whose text is `key` with `marker`.
fn replace(expr: &mut ast::Expr, key: &str, marker: &ast::Expr) {
    let _ = ast::visit_expressions_mut(expr, |e| {
        if matches!(e, ast::Expr::Function(_)) && e.to_string() == key {
            *e = marker.clone();
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn select(sql: &str) -> (Option<ast::Expr>, Vec<ast::SelectItem>) {
        let statements =
            sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::GenericDialect {}, sql)
                .unwrap();
        let ast::Statement::Query(query) = &statements[0] else {
            panic!()
        };
        let ast::SetExpr::Select(select) = query.body.as_ref() else {
            panic!()
        };
        (select.selection.clone(), select.projection.clone())
    }

    /// The calls taken out before and after the WHERE.
    fn calls(sql: &str) -> (Vec<String>, Vec<String>) {
        let (mut condition, items) = select(sql);
        let mut items: Vec<ast::Expr> = items
            .into_iter()
            .map(|item| match item {
                ast::SelectItem::UnnamedExpr(e) => e,
                _ => panic!(),
            })
            .collect();
        let deterministic = |e: &ast::Expr| !e.to_string().to_ascii_uppercase().starts_with("RAND");
        let shared = take_repeated_calls(&mut condition, &mut items, &deterministic);
        let text = |before: bool| {
            (shared.iter().filter(|s| s.before_where == before))
                .map(|s| s.call.to_string())
                .collect()
        };
        (text(true), text(false))
    }

    #[test]
    fn a_call_repeated_where_one_occurrence_is_always_evaluated_is_taken_out() {
        // q21's shape: the regular expression in the WHERE and in a CASE's ELSE; lower(..) in
        // every WHEN.
        assert_eq!(
            calls(
                "SELECT CASE WHEN lower(c) = 'a' THEN 0 WHEN lower(c) = 'b' THEN 1 \
                 ELSE re(u, 2) END FROM t WHERE re(u, 2) IS NOT NULL OR lower(c) IN ('a')"
            ),
            (vec!["re(u, 2)".to_string()], vec!["lower(c)".to_string()])
        );
        // Only under a CASE's later branches or AND's right side: never computed eagerly.
        assert_eq!(
            calls(
                "SELECT CASE WHEN b = 0 THEN 0 ELSE f(a) + f(a) END FROM t WHERE b > 0 AND g(a) > g(a)"
            ),
            (vec![], vec![])
        );
        // A nested repeat: the outer call, then nothing inside it again.
        assert_eq!(
            calls("SELECT upper(lower(c)), upper(lower(c)) || 'x' FROM t"),
            (vec![], vec!["upper(lower(c))".to_string()])
        );
        // Written once, or not deterministic: left alone.
        assert_eq!(
            calls("SELECT lower(c), upper(c) FROM t WHERE rand(1) > rand(1)"),
            (vec![], vec![])
        );
    }
}
