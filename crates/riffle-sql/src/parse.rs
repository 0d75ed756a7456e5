//! Parsing Flink's dialect: a script is cut into statements at top-level semicolons; queries,
//! views and `INSERT INTO` go through `sqlparser` (with Flink's `TABLE t` arguments of window
//! table functions rewritten to what it reads); `CREATE TABLE`, whose Flink form (`ROW<..>`
//! types, computed columns `c AS expr`, `WATERMARK FOR c AS expr`, `PRIMARY KEY (..) NOT
//! ENFORCED`, `WITH ('k' = 'v')`) `sqlparser` does not read, is parsed here with its tokenizer
//! and expression parser. Errors name the line and column in the script.

use std::collections::BTreeMap;

use sqlparser::ast;
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};

use crate::error::SqlError;
use crate::types::{DataType, Field};

/// A statement of a script.
#[derive(Debug)]
pub enum Statement {
    /// `CREATE [TEMPORARY] TABLE`.
    CreateTable(Box<TableDef>),
    /// `CREATE [TEMPORARY] VIEW name AS query`.
    CreateView {
        /// The view's name.
        name: String,
        /// Its query.
        query: Box<ast::Query>,
    },
    /// `CREATE FUNCTION name AS 'class'`: a function registered from Rust under `name`.
    CreateFunction {
        /// The name queries call it by.
        name: String,
        /// The class Flink would load (kept for messages).
        class: String,
    },
    /// `DROP [TEMPORARY] TABLE|VIEW [IF EXISTS] name`.
    Drop {
        /// The table's or view's name.
        name: String,
        /// A view (else a table).
        view: bool,
        /// `IF EXISTS`: no error when there is none.
        if_exists: bool,
    },
    /// `INSERT INTO table query`.
    Insert {
        /// The table written.
        table: String,
        /// What is written.
        query: Box<ast::Query>,
    },
    /// A query whose rows are shown.
    Query(Box<ast::Query>),
    /// `SET 'key' = 'value'`.
    Set {
        /// The option.
        key: String,
        /// Its value.
        value: String,
    },
    /// `EXPLAIN query`.
    Explain(Box<ast::Query>),
}

/// A column of a `CREATE TABLE`.
#[derive(Clone, Debug)]
pub enum ColumnDef {
    /// A column the connector fills.
    Physical(Field),
    /// `name AS expr`: computed from the others.
    Computed {
        /// Its name.
        name: String,
        /// Its expression.
        expr: Box<ast::Expr>,
    },
}

impl ColumnDef {
    /// The column's name.
    pub fn name(&self) -> &str {
        match self {
            ColumnDef::Physical(field) => &field.name,
            ColumnDef::Computed { name, .. } => name,
        }
    }
}

/// A `CREATE TABLE`.
#[derive(Clone, Debug)]
pub struct TableDef {
    /// The table's name.
    pub name: String,
    /// Its columns, in order.
    pub columns: Vec<ColumnDef>,
    /// `WATERMARK FOR column AS expr`.
    pub watermark: Option<(String, ast::Expr)>,
    /// `PRIMARY KEY (..) NOT ENFORCED`.
    pub primary_key: Vec<String>,
    /// `WITH (..)`: the connector and its options.
    pub options: BTreeMap<String, String>,
    /// `PARTITIONED BY (..)`: the columns whose values name a row's directory (a `filesystem`
    /// table's sink writes `<path>/a=1/b=x/part-..`, without those columns in the files).
    pub partition_keys: Vec<String>,
    /// Rows the program gives (a bounded table read from memory, whatever its connector
    /// option says): `riffle serve` answers a query over a materialized view by reading the
    /// view's rows as such a table.
    pub rows: Option<std::sync::Arc<Vec<crate::types::Row>>>,
    /// A changelog the program gives (a streaming table of changes, whatever its connector
    /// option says): `riffle serve`'s views read the views they name this way.
    pub changes: Option<ProgramChangelog>,
    /// Where the table's source is shared with the other jobs of the process that read it
    /// (`riffle serve`'s views over one topic): its splits are read once, every column of them
    /// ([`riffle::source::shared`]). `None`: each job reads the source itself.
    pub shared: Option<std::sync::Arc<riffle::source::shared::SourceHub<crate::types::Row>>>,
}

/// The stream of changes of a table whose changelog the program gives
/// ([`TableDef::changes`]): built in the job that reads the table.
///
/// A changelog of inserts only ([`ProgramChangelog::appends`]) is read as an append-only table,
/// with event time and watermarks when the table has a `WATERMARK` (its source is built with
/// the watermark strategy the planner gives): a window can read it.
///
/// ```
/// use riffle_sql::parse::ProgramChangelog;
/// use riffle_sql::Row;
///
/// let changes = ProgramChangelog::new(|env| env.from_iter(vec![riffle::Change::insert(Row(vec![]))]));
/// assert!(!changes.is_append_only());
/// let appends = ProgramChangelog::appends(|env, watermarks| match watermarks {
///     Some(strategy) => env.from_iter_with_watermarks(vec![riffle::Change::insert(Row(vec![]))], strategy),
///     None => env.from_iter(vec![riffle::Change::insert(Row(vec![]))]),
/// });
/// assert!(appends.is_append_only());
/// ```
#[derive(Clone)]
pub struct ProgramChangelog {
    build: std::sync::Arc<BuildChangelog>,
    append_only: bool,
}

/// What builds a [`ProgramChangelog`]'s stream in a job (with event time and watermarks by the
/// strategy, when given).
type BuildChangelog = dyn Fn(
        &riffle::StreamEnv,
        Option<ChangeWatermarks>,
    ) -> riffle::DataStream<riffle::Change<crate::types::Row>>
    + Send
    + Sync;

/// How a [`ProgramChangelog`] of inserts gets event time and watermarks.
pub type ChangeWatermarks = riffle::time::WatermarkStrategy<riffle::Change<crate::types::Row>>;

impl ProgramChangelog {
    /// The changelog `build` makes in a job's environment.
    pub fn new(
        build: impl Fn(&riffle::StreamEnv) -> riffle::DataStream<riffle::Change<crate::types::Row>>
        + Send
        + Sync
        + 'static,
    ) -> ProgramChangelog {
        ProgramChangelog {
            build: std::sync::Arc::new(move |env, _| build(env)),
            append_only: false,
        }
    }

    /// A changelog of inserts only, read as an append-only table; `build` makes it in a job's
    /// environment, with event time and watermarks by the strategy it is given (the table's
    /// `WATERMARK`), if any.
    pub fn appends(
        build: impl Fn(
            &riffle::StreamEnv,
            Option<ChangeWatermarks>,
        ) -> riffle::DataStream<riffle::Change<crate::types::Row>>
        + Send
        + Sync
        + 'static,
    ) -> ProgramChangelog {
        ProgramChangelog {
            build: std::sync::Arc::new(build),
            append_only: true,
        }
    }

    /// Whether it holds inserts only ([`ProgramChangelog::appends`]).
    pub fn is_append_only(&self) -> bool {
        self.append_only
    }

    /// The changelog, in `env`'s job.
    pub fn build(
        &self,
        env: &riffle::StreamEnv,
    ) -> riffle::DataStream<riffle::Change<crate::types::Row>> {
        (self.build)(env, None)
    }

    /// The changelog, in `env`'s job, with event time and watermarks by `watermarks`.
    pub fn build_with(
        &self,
        env: &riffle::StreamEnv,
        watermarks: Option<ChangeWatermarks>,
    ) -> riffle::DataStream<riffle::Change<crate::types::Row>> {
        (self.build)(env, watermarks)
    }
}

impl std::fmt::Debug for ProgramChangelog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgramChangelog")
    }
}

/// A statement's text, and where it starts in the script.
struct Piece {
    text: String,
    start: Location,
}

/// Parses a script of statements separated by semicolons.
pub fn parse_script(script: &str) -> Result<Vec<Statement>, SqlError> {
    split(script)?
        .into_iter()
        .map(|piece| parse_piece(&piece))
        .collect()
}

/// Parses one statement (a trailing semicolon is allowed).
pub fn parse_statement(sql: &str) -> Result<Statement, SqlError> {
    let mut statements = parse_script(sql)?;
    match statements.len() {
        1 => Ok(statements.remove(0)),
        0 => Err(SqlError::new("no statement", None)),
        n => Err(SqlError::new(
            format!("{n} statements where one was expected"),
            None,
        )),
    }
}

fn tokens(sql: &str) -> Result<Vec<TokenWithSpan>, SqlError> {
    Tokenizer::new(&GenericDialect {}, sql)
        .tokenize_with_location()
        .map_err(|e| SqlError::new(e.message.clone(), Some(e.location)))
}

/// Each token's text as it is in `text` (tokens are contiguous, in order). A token's own
/// rendering is not its text: a string literal `'it''s'` renders as `'it's'`, which would end
/// the literal early and read the rest as SQL.
fn token_sources<'a>(text: &'a str, tokens: &[TokenWithSpan]) -> Vec<&'a str> {
    let mut starts = Vec::with_capacity(tokens.len());
    let mut next = tokens.iter().map(|t| t.span.start).peekable();
    let (mut line, mut column) = (1u64, 1u64);
    for (offset, c) in text.char_indices() {
        while next
            .peek()
            .is_some_and(|l| (l.line, l.column) <= (line, column))
        {
            next.next();
            starts.push(offset);
        }
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    starts.resize(tokens.len(), text.len());
    (0..tokens.len())
        .map(|i| &text[starts[i]..starts.get(i + 1).copied().unwrap_or(text.len())])
        .collect()
}

/// The byte offset of `location` (1-based line and column, in characters) in `text`.
fn offset_of(text: &str, location: Location) -> usize {
    let mut line = 1;
    let mut column = 1;
    for (offset, c) in text.char_indices() {
        if line == location.line as usize && column == location.column as usize {
            return offset;
        }
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    text.len()
}

/// Cuts `script` at its top-level semicolons (comments and strings are tokens of their own).
/// The statements of a script, as texts without their `;` (comments and quoted `;` kept
/// inside their statements): what a server that takes statements of its own beside Flink's
/// (`riffle serve`'s `CREATE MATERIALIZED VIEW`) splits a query string into.
///
/// ```
/// let parts = riffle_sql::parse::split_statements("SET 'a' = ';'; SELECT 1 ;\n").unwrap();
/// assert_eq!(parts, ["SET 'a' = ';'", "SELECT 1"]);
/// ```
pub fn split_statements(script: &str) -> Result<Vec<String>, SqlError> {
    Ok(split(script)?
        .into_iter()
        .map(|piece| piece.text.trim_end().to_string())
        .collect())
}

fn split(script: &str) -> Result<Vec<Piece>, SqlError> {
    let mut pieces = Vec::new();
    let mut start: Option<Location> = None;
    for token in tokens(script)? {
        match &token.token {
            Token::SemiColon => {
                if let Some(at) = start.take() {
                    let (from, to) = (offset_of(script, at), offset_of(script, token.span.start));
                    pieces.push(Piece {
                        text: script[from..to].to_string(),
                        start: at,
                    });
                }
            }
            Token::Whitespace(_) | Token::EOF => {}
            _ => {
                start.get_or_insert(token.span.start);
            }
        }
    }
    if let Some(at) = start {
        let from = offset_of(script, at);
        pieces.push(Piece {
            text: script[from..].trim_end().to_string(),
            start: at,
        });
    }
    Ok(pieces)
}

/// The statement's text, padded so that the parser's locations are the script's.
fn positioned(piece: &Piece) -> String {
    let mut text = "\n".repeat(piece.start.line.saturating_sub(1) as usize);
    text.push_str(&" ".repeat(piece.start.column.saturating_sub(1) as usize));
    text.push_str(&piece.text);
    text
}

/// A `sqlparser` error, with its location when it names one.
fn parser_error(e: ParserError) -> SqlError {
    let message = match e {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m,
        ParserError::RecursionLimitExceeded => "the statement is nested too deeply".to_string(),
    };
    // "... at Line: 3, Column: 14"
    let location = message.rsplit_once(" at Line: ").and_then(|(_, at)| {
        let (line, column) = at.split_once(", Column: ")?;
        Some(Location::new(
            line.parse().ok()?,
            column.trim().parse().ok()?,
        ))
    });
    let message = message
        .rsplit_once(" at Line: ")
        .map_or(message.clone(), |(m, _)| m.to_string());
    SqlError::new(message, location)
}

fn parse_piece(piece: &Piece) -> Result<Statement, SqlError> {
    let text = positioned(piece);
    let words: Vec<String> = tokens(&piece.text)?
        .iter()
        .filter_map(|t| match &t.token {
            Token::Word(w) => Some(w.value.to_ascii_uppercase()),
            Token::Whitespace(_) => None,
            _ => Some(String::new()),
        })
        .take(3)
        .collect();
    let first = |n: usize| words.get(n).map(String::as_str).unwrap_or("");
    match (first(0), first(1), first(2)) {
        ("CREATE", "TABLE", _) | ("CREATE", "TEMPORARY", "TABLE") => {
            parse_create_table(&split_shift_right(&text)?)
                .map(|table| Statement::CreateTable(Box::new(table)))
        }
        ("CREATE", "FUNCTION", _) | ("CREATE", "TEMPORARY", "FUNCTION") => {
            parse_create_function(&text)
        }
        ("CREATE", "TEMPORARY", "VIEW") => parse_sqlparser(&text.replacen("TEMPORARY", "", 1)),
        ("SET", _, _) => parse_set(&text),
        _ => parse_sqlparser(&rewrite_table_arguments(&rewrite_within(&text)?)?),
    }
}

/// Flink's `MATCH_RECOGNIZE (.. PATTERN (..) WITHIN INTERVAL '10' MINUTE DEFINE ..)`, which
/// the parser does not read, with the `WITHIN` carried as one more `DEFINE` entry named
/// [`crate::recognize::WITHIN_SYMBOL`]: `.. PATTERN (..) DEFINE .., __riffle_within AS
/// INTERVAL '10' MINUTE)`.
fn rewrite_within(text: &str) -> Result<String, SqlError> {
    if !text.to_ascii_uppercase().contains("MATCH_RECOGNIZE") {
        return Ok(text.to_string());
    }
    let tokens = tokens(text)?;
    let sources = token_sources(text, &tokens);
    let solid: Vec<usize> = (0..tokens.len())
        .filter(|i| !matches!(tokens[*i].token, Token::Whitespace(_)))
        .collect();
    let word = |k: usize| match solid.get(k).map(|i| &tokens[*i].token) {
        Some(Token::Word(w)) => w.value.to_ascii_uppercase(),
        _ => String::new(),
    };
    // (first token of the clause, last token, the interval's text, where the entry goes)
    let mut edits: Vec<(usize, usize, String, usize)> = Vec::new();
    let mut k = 0;
    while k < solid.len() {
        if !(word(k) == "WITHIN" && word(k + 1) == "INTERVAL") {
            k += 1;
            continue;
        }
        // INTERVAL '10' MINUTE, or INTERVAL '10' SECOND(3).
        let mut end = k + 3;
        if matches!(
            solid.get(end + 1).map(|i| &tokens[*i].token),
            Some(Token::LParen)
        ) {
            while end < solid.len() && !matches!(tokens[solid[end]].token, Token::RParen) {
                end += 1;
            }
        }
        let Some(&last) = solid.get(end) else {
            return Err(SqlError::new(
                "WITHIN INTERVAL: the interval is cut short",
                None,
            ));
        };
        let interval: String = sources[solid[k + 1]..=last].concat();
        // The end of the DEFINE list: the parenthesis that closes MATCH_RECOGNIZE (.
        let mut depth = 0usize;
        let mut close = None;
        let mut seen_define = false;
        for j in end + 1..solid.len() {
            match &tokens[solid[j]].token {
                Token::Word(w) if w.value.eq_ignore_ascii_case("DEFINE") && depth == 0 => {
                    seen_define = true
                }
                Token::LParen => depth += 1,
                Token::RParen if depth == 0 => {
                    close = Some(solid[j]);
                    break;
                }
                Token::RParen => depth -= 1,
                _ => {}
            }
        }
        match (seen_define, close) {
            (true, Some(close)) => edits.push((solid[k], last, interval, close)),
            _ => {
                return Err(SqlError::new(
                    "WITHIN INTERVAL belongs after the PATTERN of a MATCH_RECOGNIZE, before its DEFINE",
                    None,
                ));
            }
        }
        k = end + 1;
    }
    if edits.is_empty() {
        return Ok(text.to_string());
    }
    let mut out = String::with_capacity(text.len() + 64);
    let mut i = 0;
    while i < tokens.len() {
        if let Some((_, last, _, _)) = edits.iter().find(|(first, ..)| *first == i) {
            i = last + 1;
            continue;
        }
        if let Some((_, _, interval, _)) = edits.iter().find(|(.., close)| *close == i) {
            out.push_str(&format!(
                ", {} AS {interval}",
                crate::recognize::WITHIN_SYMBOL
            ));
        }
        out.push_str(sources[i]);
        i += 1;
    }
    Ok(out)
}

/// What the name of a table read `FOR SYSTEM_TIME AS OF time` carries after it (the parser's
/// dialect does not read the clause): `` `side_input FOR SYSTEM_TIME AS OF B.p_time` ``, a
/// lookup join's table.
pub const SYSTEM_TIME_MARK: &str = " FOR SYSTEM_TIME AS OF ";

/// `TUMBLE(TABLE bid, ...)` as `TUMBLE(bid, ...)`: a `TABLE` keyword right after `(`, `,` or
/// `=>` names a table argument of a table function. And `t FOR SYSTEM_TIME AS OF B.p_time`
/// (a temporal table, Flink's lookup join) as one quoted name, `` `t FOR SYSTEM_TIME AS OF
/// B.p_time` `` ([`SYSTEM_TIME_MARK`]); `TABLE t PARTITION BY a, b` becomes `` `t PARTITION BY
/// a,b` `` ([`PARTITION_MARK`]).
/// What separates a table argument's name from its partition columns in the name
/// [`rewrite_table_arguments`] makes of `TABLE t PARTITION BY a, b`.
pub const PARTITION_MARK: &str = " PARTITION BY ";

/// At `tokens[i]`, a table name followed by `PARTITION BY` columns (`a, b` or `(a, b)`) up to
/// the comma before the next argument: the name `t PARTITION BY a,b` and where it ends.
fn partitioned_table(tokens: &[TokenWithSpan], i: usize) -> Option<(String, usize)> {
    let solid: Vec<usize> = (i..tokens.len())
        .filter(|j| !matches!(tokens[*j].token, Token::Whitespace(_)))
        .collect();
    let word = |k: usize| match solid.get(k).map(|j| &tokens[*j].token) {
        Some(Token::Word(w)) => Some(w),
        _ => None,
    };
    let table = word(0)?.value.clone();
    if !(word(1)?.keyword == Keyword::PARTITION && word(2)?.keyword == Keyword::BY) {
        return None;
    }
    let mut columns: Vec<String> = Vec::new();
    let mut k = 3;
    let parenthesized = matches!(solid.get(k).map(|j| &tokens[*j].token), Some(Token::LParen));
    if parenthesized {
        k += 1;
    }
    loop {
        columns.push(word(k)?.value.clone());
        k += 1;
        match solid.get(k).map(|j| &tokens[*j].token) {
            Some(Token::Comma) if parenthesized => k += 1,
            // A comma outside parentheses: another column, unless the next argument starts.
            Some(Token::Comma)
                if word(k + 1).is_some_and(|w| !w.value.eq_ignore_ascii_case("DESCRIPTOR")) =>
            {
                k += 1
            }
            Some(Token::RParen) if parenthesized => {
                k += 1;
                break;
            }
            _ => break,
        }
    }
    let end = solid.get(k).copied().unwrap_or(tokens.len());
    Some((format!("{table}{PARTITION_MARK}{}", columns.join(",")), end))
}

fn rewrite_table_arguments(text: &str) -> Result<String, SqlError> {
    let tokens = tokens(text)?;
    let sources = token_sources(text, &tokens);
    let mut out = String::with_capacity(text.len());
    let mut previous: Option<&Token> = None;
    // Where in `out` the last word starts, and the word.
    let mut last_word: Option<(usize, String)> = None;
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i].token;
        let upper = |t: &Token| match t {
            Token::Word(w) => w.value.to_ascii_uppercase(),
            _ => String::new(),
        };
        let words: Vec<usize> = (i..tokens.len())
            .filter(|j| !matches!(tokens[*j].token, Token::Whitespace(_)))
            .take(4)
            .collect();
        let clause: Vec<String> = words.iter().map(|j| upper(&tokens[*j].token)).collect();
        if clause == ["FOR", "SYSTEM_TIME", "AS", "OF"]
            && let Some((start, table)) = last_word.take()
        {
            // The time: a column, qualified or not.
            let mut j = words[3] + 1;
            let mut time = String::new();
            while j < tokens.len() {
                match &tokens[j].token {
                    Token::Whitespace(_) if time.is_empty() => {}
                    Token::Word(w) if time.is_empty() || time.ends_with('.') => {
                        time.push_str(&w.value)
                    }
                    Token::Period if !time.is_empty() => time.push('.'),
                    _ => break,
                }
                j += 1;
            }
            out.truncate(start);
            out.push_str(&format!("`{table}{SYSTEM_TIME_MARK}{time}`"));
            i = j;
            continue;
        }
        if let Token::Word(w) = token {
            last_word = Some((out.len(), w.value.clone()));
        } else if !matches!(token, Token::Whitespace(_)) {
            last_word = None;
        }
        let is_table = matches!(token, Token::Word(w) if w.keyword == Keyword::TABLE);
        let after_argument_start = matches!(
            previous,
            Some(Token::LParen) | Some(Token::Comma) | Some(Token::RArrow)
        );
        let next_is_name = tokens[i + 1..]
            .iter()
            .find(|t| !matches!(t.token, Token::Whitespace(_)))
            .is_some_and(|t| matches!(t.token, Token::Word(_)));
        if is_table && after_argument_start && next_is_name {
            // Dropped, with the whitespace after it.
            i += 1;
            while i < tokens.len() && matches!(tokens[i].token, Token::Whitespace(_)) {
                i += 1;
            }
            // `TABLE t PARTITION BY a, b` (a session window's keys): one quoted name,
            // `t PARTITION BY a,b` ([`PARTITION_MARK`]), up to the argument's end.
            if let Some((name, end)) = partitioned_table(&tokens, i) {
                out.push_str(&format!("`{name}`"));
                previous = Some(&tokens[i].token);
                i = end;
            }
            continue;
        }
        out.push_str(sources[i]);
        if !matches!(token, Token::Whitespace(_)) {
            previous = Some(token);
        }
        i += 1;
    }
    Ok(out)
}

fn parse_sqlparser(text: &str) -> Result<Statement, SqlError> {
    let mut statements = Parser::parse_sql(&GenericDialect {}, text).map_err(parser_error)?;
    let statement = statements
        .pop()
        .ok_or_else(|| SqlError::new("no statement", None))?;
    let location = || Some(first_location(text));
    match statement {
        ast::Statement::Query(query) => Ok(Statement::Query(query)),
        ast::Statement::Insert(insert) => {
            let table = match &insert.table {
                ast::TableObject::TableName(name) => name.to_string(),
                other => {
                    return Err(SqlError::new(
                        format!("INSERT INTO {other}: only a table name can be written"),
                        location(),
                    ));
                }
            };
            let query = insert.source.ok_or_else(|| {
                SqlError::new(
                    format!("INSERT INTO {table} needs a query (VALUES ... or SELECT ...)"),
                    location(),
                )
            })?;
            if !insert.columns.is_empty() {
                return Err(SqlError::new(
                    format!(
                        "INSERT INTO {table} (columns ...): a column list is not supported yet; select every column of the table in order"
                    ),
                    location(),
                ));
            }
            Ok(Statement::Insert { table, query })
        }
        ast::Statement::Drop {
            object_type: object_type @ (ast::ObjectType::Table | ast::ObjectType::View),
            if_exists,
            names,
            ..
        } if names.len() == 1 => Ok(Statement::Drop {
            name: names[0].to_string(),
            view: object_type == ast::ObjectType::View,
            if_exists,
        }),
        ast::Statement::CreateView(view) => Ok(Statement::CreateView {
            name: view.name.to_string(),
            query: view.query,
        }),
        ast::Statement::Explain { statement, .. } => match *statement {
            ast::Statement::Query(query) => Ok(Statement::Explain(query)),
            ast::Statement::Insert(insert) => insert
                .source
                .map(Statement::Explain)
                .ok_or_else(|| SqlError::new("EXPLAIN INSERT needs a query", location())),
            other => Err(SqlError::new(
                format!("EXPLAIN {other}: only queries are explained"),
                location(),
            )),
        },
        other => Err(SqlError::new(
            format!("`{}` is not supported", first_words(&other.to_string())),
            location(),
        )),
    }
}

/// Where the first token of `text` is.
fn first_location(text: &str) -> Location {
    tokens(text)
        .ok()
        .and_then(|t| {
            t.into_iter()
                .find(|t| !matches!(t.token, Token::Whitespace(_)))
        })
        .map_or(Location::new(1, 1), |t| t.span.start)
}

fn first_words(text: &str) -> String {
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `SET 'key' = 'value'` (quotes optional).
fn parse_set(text: &str) -> Result<Statement, SqlError> {
    let mut parser = new_parser(text)?;
    parser.expect_keyword(Keyword::SET).map_err(parser_error)?;
    let key = parse_name_or_string(&mut parser)?;
    parser.expect_token(&Token::Eq).map_err(parser_error)?;
    let value = parse_name_or_string(&mut parser)?;
    Ok(Statement::Set { key, value })
}

fn parse_name_or_string(parser: &mut Parser<'_>) -> Result<String, SqlError> {
    let token = parser.next_token();
    match token.token {
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => Ok(s),
        Token::Word(w) => {
            // Dotted keys: table.exec.state.ttl
            let mut name = w.value;
            while parser.consume_token(&Token::Period) {
                name.push('.');
                name.push_str(&parser.parse_identifier().map_err(parser_error)?.value);
            }
            Ok(name)
        }
        Token::Number(n, _) => Ok(n),
        other => Err(SqlError::new(
            format!("expected a name or a string, found {other}"),
            Some(token.span.start),
        )),
    }
}

fn new_parser(text: &str) -> Result<Parser<'static>, SqlError> {
    static DIALECT: GenericDialect = GenericDialect {};
    Parser::new(&DIALECT)
        .try_with_sql(text)
        .map_err(parser_error)
}

/// `CREATE [TEMPORARY] FUNCTION name AS 'class' [LANGUAGE JAVA]`.
fn parse_create_function(text: &str) -> Result<Statement, SqlError> {
    let mut parser = new_parser(text)?;
    parser
        .expect_keyword(Keyword::CREATE)
        .map_err(parser_error)?;
    let _ = parser.parse_keyword(Keyword::TEMPORARY);
    parser
        .expect_keyword(Keyword::FUNCTION)
        .map_err(parser_error)?;
    let name = parser
        .parse_object_name(false)
        .map_err(parser_error)?
        .to_string();
    parser.expect_keyword(Keyword::AS).map_err(parser_error)?;
    let class = parser.parse_literal_string().map_err(parser_error)?;
    Ok(Statement::CreateFunction { name, class })
}

/// Flink's `CREATE TABLE`.
fn parse_create_table(text: &str) -> Result<TableDef, SqlError> {
    let mut parser = new_parser(text)?;
    let p = &mut parser;
    p.expect_keyword(Keyword::CREATE).map_err(parser_error)?;
    let _ = p.parse_keyword(Keyword::TEMPORARY);
    p.expect_keyword(Keyword::TABLE).map_err(parser_error)?;
    let _ = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let name = p
        .parse_object_name(false)
        .map_err(parser_error)?
        .to_string();
    p.expect_token(&Token::LParen).map_err(parser_error)?;
    let mut table = TableDef {
        name,
        columns: Vec::new(),
        watermark: None,
        primary_key: Vec::new(),
        options: BTreeMap::new(),
        partition_keys: Vec::new(),
        rows: None,
        changes: None,
        shared: None,
    };
    loop {
        if parse_word(p, "WATERMARK") {
            p.expect_keyword(Keyword::FOR).map_err(parser_error)?;
            let column = p.parse_identifier().map_err(parser_error)?.value;
            p.expect_keyword(Keyword::AS).map_err(parser_error)?;
            let expr = p.parse_expr().map_err(parser_error)?;
            table.watermark = Some((column, expr));
        } else if p.parse_keywords(&[Keyword::PRIMARY, Keyword::KEY]) {
            p.expect_token(&Token::LParen).map_err(parser_error)?;
            table.primary_key = p
                .parse_comma_separated(|p| p.parse_identifier())
                .map_err(parser_error)?
                .into_iter()
                .map(|i| i.value)
                .collect();
            p.expect_token(&Token::RParen).map_err(parser_error)?;
            let _ = p.parse_keywords(&[Keyword::NOT, Keyword::ENFORCED]);
        } else {
            let column = p.parse_identifier().map_err(parser_error)?.value;
            if p.parse_keyword(Keyword::AS) {
                let expr = p.parse_expr().map_err(parser_error)?;
                table.columns.push(ColumnDef::Computed {
                    name: column,
                    expr: Box::new(expr),
                });
            } else {
                let ty = parse_type(p)?;
                let mut field = Field::new(column, ty);
                if p.parse_keywords(&[Keyword::NOT, Keyword::NULL]) {
                    field.nullable = false;
                }
                if p.parse_keywords(&[Keyword::PRIMARY, Keyword::KEY]) {
                    let _ = p.parse_keywords(&[Keyword::NOT, Keyword::ENFORCED]);
                    table.primary_key = vec![field.name.clone()];
                }
                table.columns.push(ColumnDef::Physical(field));
            }
        }
        if !p.consume_token(&Token::Comma) {
            break;
        }
    }
    p.expect_token(&Token::RParen).map_err(parser_error)?;
    if parse_word(p, "PARTITIONED") {
        p.expect_keyword(Keyword::BY).map_err(parser_error)?;
        p.expect_token(&Token::LParen).map_err(parser_error)?;
        loop {
            table
                .partition_keys
                .push(p.parse_identifier().map_err(parser_error)?.value);
            if !p.consume_token(&Token::Comma) {
                break;
            }
        }
        p.expect_token(&Token::RParen).map_err(parser_error)?;
    }
    if p.parse_keyword(Keyword::WITH) {
        p.expect_token(&Token::LParen).map_err(parser_error)?;
        loop {
            let key = p.parse_literal_string().map_err(parser_error)?;
            p.expect_token(&Token::Eq).map_err(parser_error)?;
            let value = p.parse_literal_string().map_err(parser_error)?;
            table.options.insert(key, value);
            if !p.consume_token(&Token::Comma) {
                break;
            }
        }
        p.expect_token(&Token::RParen).map_err(parser_error)?;
    }
    // Flink's legacy option names (the nexmark project's q13 uses them).
    for (legacy, key) in [
        ("connector.type", "connector"),
        ("connector.path", "path"),
        ("format.type", "format"),
    ] {
        if let Some(value) = table.options.remove(legacy) {
            table.options.entry(key.to_string()).or_insert(value);
        }
    }
    let rest = p.peek_token();
    if rest.token != Token::EOF {
        return Err(SqlError::new(
            format!(
                "unexpected {} after CREATE TABLE {}",
                rest.token, table.name
            ),
            Some(rest.span.start),
        ));
    }
    Ok(table)
}

/// Consumes the next token if it is the word `word` (any case; for words that are no keyword
/// of `sqlparser`).
fn parse_word(p: &mut Parser<'_>, word: &str) -> bool {
    match &p.peek_token().token {
        Token::Word(w) if w.value.eq_ignore_ascii_case(word) => {
            p.next_token();
            true
        }
        _ => false,
    }
}

/// A column type: `ROW<..>`, `ARRAY<..>`, `MAP<..>` here, the others through `sqlparser`.
fn parse_type(p: &mut Parser<'_>) -> Result<DataType, SqlError> {
    let token = p.peek_token();
    if let Token::Word(word) = &token.token {
        let upper = word.value.to_ascii_uppercase();
        let nested = matches!(upper.as_str(), "ROW" | "ARRAY" | "MAP" | "MULTISET")
            && matches!(p.peek_nth_token(1).token, Token::Lt);
        if nested {
            p.next_token();
            p.next_token(); // <
            let ty = match upper.as_str() {
                "ROW" => {
                    let mut fields = Vec::new();
                    loop {
                        let name = p.parse_identifier().map_err(parser_error)?.value;
                        let ty = parse_type(p)?;
                        let mut field = Field::new(name, ty);
                        if p.parse_keywords(&[Keyword::NOT, Keyword::NULL]) {
                            field.nullable = false;
                        }
                        fields.push(field);
                        if !p.consume_token(&Token::Comma) {
                            break;
                        }
                    }
                    DataType::Row(fields)
                }
                "ARRAY" | "MULTISET" => DataType::Array(Box::new(parse_type(p)?)),
                _ => {
                    let key = parse_type(p)?;
                    p.expect_token(&Token::Comma).map_err(parser_error)?;
                    DataType::Map(Box::new(key), Box::new(parse_type(p)?))
                }
            };
            expect_closing_angle(p)?;
            return Ok(ty);
        }
        if upper == "STRING" {
            p.next_token();
            return Ok(DataType::Varchar);
        }
        if upper == "TIMESTAMP_LTZ" {
            p.next_token();
            let precision = parse_precision(p)?.unwrap_or(6);
            return Ok(DataType::TimestampLtz { precision });
        }
    }
    let at = token.span.start;
    let ty = p.parse_data_type().map_err(parser_error)?;
    convert_type(&ty).ok_or_else(|| SqlError::new(format!("type {ty} is not supported"), Some(at)))
}

/// `(n)` after a type name.
fn parse_precision(p: &mut Parser<'_>) -> Result<Option<u8>, SqlError> {
    if !p.consume_token(&Token::LParen) {
        return Ok(None);
    }
    let token = p.next_token();
    let Token::Number(n, _) = &token.token else {
        return Err(SqlError::new(
            "expected a precision",
            Some(token.span.start),
        ));
    };
    let n = n
        .parse()
        .map_err(|_| SqlError::new("expected a small precision", Some(token.span.start)))?;
    p.expect_token(&Token::RParen).map_err(parser_error)?;
    Ok(Some(n))
}

/// The `>` closing a nested type (`>>` was split before parsing: [`split_shift_right`]).
fn expect_closing_angle(p: &mut Parser<'_>) -> Result<(), SqlError> {
    let token = p.next_token();
    match token.token {
        Token::Gt => Ok(()),
        other => Err(SqlError::new(
            format!("expected `>`, found {other}"),
            Some(token.span.start),
        )),
    }
}

/// Converts `sqlparser`'s type.
pub(crate) fn convert_type(ty: &ast::DataType) -> Option<DataType> {
    use ast::DataType as T;
    Some(match ty {
        T::Boolean | T::Bool => DataType::Boolean,
        T::TinyInt(_) => DataType::TinyInt,
        T::SmallInt(_) => DataType::SmallInt,
        T::Int(_) | T::Integer(_) => DataType::Int,
        T::BigInt(_) => DataType::BigInt,
        T::Float(_) | T::Real => DataType::Float,
        T::Double(_) | T::DoublePrecision => DataType::Double,
        T::Decimal(info) | T::Numeric(info) | T::Dec(info) => {
            let (precision, scale) = match info {
                ast::ExactNumberInfo::None => (10, 0),
                ast::ExactNumberInfo::Precision(p) => (*p as u8, 0),
                ast::ExactNumberInfo::PrecisionAndScale(p, s) => (*p as u8, *s as u8),
            };
            if precision == 0 || precision > 38 || scale > precision {
                return None;
            }
            DataType::Decimal { precision, scale }
        }
        T::Varchar(_)
        | T::Char(_)
        | T::CharVarying(_)
        | T::Character(_)
        | T::CharacterVarying(_)
        | T::String(_)
        | T::Text => DataType::Varchar,
        T::Date => DataType::Date,
        T::Timestamp(precision, zone) => {
            let precision = precision.unwrap_or(6) as u8;
            match zone {
                ast::TimezoneInfo::WithTimeZone | ast::TimezoneInfo::Tz => {
                    DataType::TimestampLtz { precision }
                }
                _ => DataType::Timestamp { precision },
            }
        }
        T::Interval { .. } => DataType::Interval,
        _ => return None,
    })
}

/// Rewrites `>>` between type arguments as `> >`, so that nested types parse (`ROW<a
/// ARRAY<INT>>`). Only outside strings; `>>` is no operator in Flink SQL.
pub(crate) fn split_shift_right(script: &str) -> Result<String, SqlError> {
    let tokens = tokens(script)?;
    Ok(tokens
        .iter()
        .zip(token_sources(script, &tokens))
        .map(|(t, source)| match t.token {
            Token::ShiftRight => "> >",
            _ => source,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_table_argument_keeps_its_partition_columns() {
        for (text, want) in [
            (
                "SELECT * FROM TABLE(SESSION(TABLE t PARTITION BY a, DESCRIPTOR(ts), INTERVAL '1' SECOND))",
                "SELECT * FROM TABLE(SESSION(`t PARTITION BY a`, DESCRIPTOR(ts), INTERVAL '1' SECOND))",
            ),
            (
                "SELECT * FROM TABLE(SESSION(TABLE t PARTITION BY (a, b), DESCRIPTOR(ts), INTERVAL '1' SECOND))",
                "SELECT * FROM TABLE(SESSION(`t PARTITION BY a,b`, DESCRIPTOR(ts), INTERVAL '1' SECOND))",
            ),
            (
                "SELECT * FROM TABLE(SESSION(TABLE t PARTITION BY a, b, DESCRIPTOR(ts), INTERVAL '1' SECOND))",
                "SELECT * FROM TABLE(SESSION(`t PARTITION BY a,b`, DESCRIPTOR(ts), INTERVAL '1' SECOND))",
            ),
            (
                "SELECT * FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND))",
                "SELECT * FROM TABLE(TUMBLE(t, DESCRIPTOR(ts), INTERVAL '1' SECOND))",
            ),
        ] {
            assert_eq!(rewrite_table_arguments(text).unwrap(), want);
        }
    }

    #[test]
    fn a_quote_doubled_in_a_string_stays_in_the_string() {
        // Rendered from its tokens, `'3'' OR ''1'' = ''1'` became `'3' OR '1' = '1'`: SQL.
        let Statement::Query(q) =
            parse_statement("SELECT a FROM t WHERE b = '3'' OR ''1'' = ''1' AND c = 'x'").unwrap()
        else {
            panic!()
        };
        assert_eq!(
            q.to_string(),
            "SELECT a FROM t WHERE b = '3'' OR ''1'' = ''1' AND c = 'x'"
        );
        assert_eq!(
            split_shift_right("CREATE TABLE t (a ROW<b ARRAY<INT>>) WITH ('p' = 'it''s')").unwrap(),
            "CREATE TABLE t (a ROW<b ARRAY<INT> >) WITH ('p' = 'it''s')"
        );
    }

    #[test]
    fn a_flink_create_table_with_rows_computed_columns_and_a_watermark() {
        let sql = "CREATE TABLE datagen (
            event_type int,
            person ROW<id BIGINT, name VARCHAR, dateTime TIMESTAMP(3)>,
            dateTime AS CASE WHEN event_type = 0 THEN person.dateTime END,
            WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
        ) WITH ('connector' = 'nexmark', 'events.num' = '100');";
        let Statement::CreateTable(table) = parse_statement(sql).unwrap() else {
            panic!("a table");
        };
        assert_eq!(table.name, "datagen");
        let names: Vec<&str> = table.columns.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["event_type", "person", "dateTime"]);
        let ColumnDef::Physical(person) = &table.columns[1] else {
            panic!()
        };
        assert_eq!(
            person.ty.to_string(),
            "ROW<`id` BIGINT, `name` VARCHAR, `dateTime` TIMESTAMP(3)>"
        );
        assert!(matches!(table.columns[2], ColumnDef::Computed { .. }));
        let (column, expr) = table.watermark.unwrap();
        assert_eq!(column, "dateTime");
        assert_eq!(expr.to_string(), "dateTime - INTERVAL '4' SECOND");
        assert_eq!(table.options["connector"], "nexmark");
    }

    #[test]
    fn window_table_functions_read_their_table_argument() {
        let sql = "SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND)) GROUP BY window_start, window_end";
        assert!(matches!(parse_statement(sql).unwrap(), Statement::Query(_)));
    }

    #[test]
    fn a_script_is_cut_at_semicolons_and_errors_name_their_line() {
        let script = "SET 'parallelism.default' = '2';\n-- a comment; with a semicolon\nINSERT INTO t SELECT 'a;b' FROM s;\nSELECT FROM WHERE;";
        let error = parse_script(script).unwrap_err();
        assert_eq!(error.location.map(|l| l.line), Some(4), "{error}");
        let ok =
            parse_script("SET 'parallelism.default' = '2';\nINSERT INTO t SELECT 'a;b' FROM s;")
                .unwrap();
        assert!(
            matches!(&ok[0], Statement::Set { key, value } if key == "parallelism.default" && value == "2")
        );
        assert!(matches!(&ok[1], Statement::Insert { table, .. } if table == "t"));
    }

    #[test]
    fn nested_types_closed_by_two_angles_parse() {
        let sql = "CREATE TABLE t (a ROW<b ARRAY<INT>>, m MAP<STRING, BIGINT>) WITH ('connector' = 'blackhole')";
        let Statement::CreateTable(table) = parse_statement(sql).unwrap() else {
            panic!()
        };
        let ColumnDef::Physical(a) = &table.columns[0] else {
            panic!()
        };
        assert_eq!(a.ty.to_string(), "ROW<`b` ARRAY<INT>>");
    }

    #[test]
    fn a_bad_type_is_named() {
        let error = parse_statement("CREATE TABLE t (a GEOMETRY) WITH ('connector' = 'blackhole')")
            .unwrap_err();
        assert!(error.to_string().contains("GEOMETRY"), "{error}");
    }
}
