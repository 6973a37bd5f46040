"""The package's refusals, shaped like the service's.

The service answers a refused request with a status and a body
{"error": message, "field": field}; the field is what a client (or a
training script) has to fix. Each refusal here carries the same three
things, with the same text, so a row that would be refused in serving is
refused in training too, and says where.
"""


class NumaserveError(ValueError):
    """A refusal: `message` is the service's whole message ("items[0].id:
    required"), `field` the field it names ("" when none)."""

    status = 400

    def __init__(self, field, message):
        super().__init__(message)
        self.field = field
        self.message = message

    def to_json(self):
        """The body the service answers with (field left out when empty)."""
        body = {"error": self.message}
        if self.field:
            body["field"] = self.field
        return body


class RequestError(NumaserveError):
    """A /predict body the service refuses: 400, or 404 for a model it does
    not serve (field "model")."""

    def __init__(self, field, message, status=400):
        super().__init__(field, message)
        self.status = status


class SpecError(NumaserveError):
    """A model.yaml the service refuses to load: the message starts with the
    file and line ("dir/model.yaml line 7: features[2].kind: want one of
    ..."), the field names the key (the file itself for a YAML syntax error)."""


class StoreError(NumaserveError):
    """A JSON Lines feature store the service refuses to load ("store.jsonl
    line 3: id must be a string or an integer", field "id"), or a stored
    value a model cannot read (the service checks every item at start)."""
