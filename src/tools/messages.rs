//! Model-facing texts of the dispatcher. These are an interface: the model
//! reads them to decide its next step, and tests assert on them. Each one
//! says what was wrong and what to do next.

/// The model called a tool that does not exist.
pub fn unknown_tool(name: &str, known: &[String]) -> String {
    format!(
        "Error: there is no tool named `{name}`. Available tools: {}. Call one of these by its exact name.",
        known.join(", ")
    )
}

/// The arguments were not valid JSON.
pub fn arguments_not_json(parse_error: &str, raw: &str) -> String {
    const SHOWN: usize = 200;
    let shown = crate::text::shorten(raw, SHOWN);
    format!(
        "Error: the tool arguments are not valid JSON ({parse_error}). You sent: {shown}\nSend the arguments again as one JSON object, with strings quoted and escaped."
    )
}

/// The arguments were JSON but not an object.
pub fn arguments_not_object(got: &str) -> String {
    format!(
        "Error: the tool arguments must be a JSON object, but they are {got}. Send an object such as {{\"name\": value}}."
    )
}

/// The arguments did not match the tool's schema.
pub fn invalid_arguments(tool: &str, problems: &str) -> String {
    format!(
        "Error: invalid arguments for `{tool}`: {problems}. Check the tool's parameters and call it again."
    )
}

/// The turn was interrupted before this call could run or finish.
pub const CANCELLED: &str = "Cancelled: the person interrupted the turn before this tool call finished. Do not assume it ran.";
