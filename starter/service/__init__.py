"""`helper-starter serve`: the starter as a long-lived HTTP/JSON service for Iva (R47), with the commands of the
console script (`starter.commands`), their checks, JSON bodies and refusals, and live lines as Server-Sent Events.
docs/api.md describes it; docs/api/openapi.json is its OpenAPI document."""
