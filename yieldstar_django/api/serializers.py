"""Serializers of the API's bodies. The store views build their bodies by hand from the
store client's results; these classes document them in the OpenAPI schema and validate
the execution start request."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ..core.constants import MAX_KEY_LENGTH
from ..principals import RESERVED_PREFIXES, is_reserved


class ErrorSerializer(serializers.Serializer[Any]):
    """Every error: a message and a machine-readable code, plus members some codes add."""

    detail = serializers.CharField()
    code = serializers.CharField()
    issues = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="Schema rejections (`invalid_state`): `{message, path}` each.",
    )
    path = serializers.ListField(
        child=serializers.JSONField(),
        required=False,
        help_text="Where the value is not durable (`not_durable`).",
    )
    operation = serializers.IntegerField(
        required=False, allow_null=True, help_text="Index of the failing patch operation."
    )
    current_etag = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="The store's ETag (`precondition_failed`); null when the store does not exist.",
    )
    field_errors = serializers.JSONField(required=False, help_text="Errors by field (`invalid`).")


class StoreDefinitionSerializer(serializers.Serializer[Any]):
    """A registered store definition and how many stores it has."""

    name = serializers.CharField()
    instances = serializers.IntegerField(
        allow_null=True,
        help_text="Stores of this definition that exist and the user may view; null when "
        "the definition's permission hook answers only per id (counting would ask it of "
        "every store).",
    )
    url = serializers.URLField(help_text="Where its ids are listed.")


class StoreIdPageSerializer(serializers.Serializer[Any]):
    """One page of store ids, in ascending code-point order."""

    results = serializers.ListField(child=serializers.CharField())
    next = serializers.URLField(allow_null=True, help_text="The next page, or null.")


class StoreSnapshotSerializer(serializers.Serializer[Any]):
    """A store's state at (``instance_id``, ``version``); the ETag names the same pair."""

    name = serializers.CharField()
    id = serializers.CharField()
    instance_id = serializers.CharField()
    version = serializers.IntegerField(min_value=0)
    state = serializers.JSONField(help_text="The state, as the definition's schema shapes it.")


class StoreWriteResultSerializer(serializers.Serializer[Any]):
    """A committed write (or the replay of one): the new state and its versions."""

    name = serializers.CharField()
    id = serializers.CharField()
    instance_id = serializers.CharField(
        allow_null=True, help_text="Null only when a replay cannot name the instance."
    )
    previous_version = serializers.IntegerField(min_value=0)
    version = serializers.IntegerField(min_value=0)
    state = serializers.JSONField()
    replayed = serializers.BooleanField(
        help_text="Whether this answers an earlier request with the same Idempotency-Key."
    )


class JsonPatchOperationSerializer(serializers.Serializer[Any]):
    """One RFC 6902 operation (documentation only; the view validates patches itself)."""

    op = serializers.ChoiceField(choices=["add", "remove", "replace", "move", "copy", "test"])
    path = serializers.CharField(allow_blank=True, help_text="A JSON Pointer (RFC 6901).")
    value = serializers.JSONField(required=False)
    from_ = serializers.CharField(required=False, help_text="A JSON Pointer (move, copy).")

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields


def _encodable(value: str) -> None:
    """Text the tables can hold: no lone surrogates (DRF refuses NUL already)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise serializers.ValidationError("This text holds a lone surrogate.") from None


def _addressable_id(value: str) -> None:
    """An execution id the API can store and address (no lone surrogates, no ``/``) and a
    client may pick: none in a namespace the server derives ids in (``http:``, ``admin:``,
    see :mod:`~yieldstar_django.principals`)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise serializers.ValidationError("This text holds a lone surrogate.") from None
    if "/" in value:
        raise serializers.ValidationError("An execution id started over HTTP cannot hold '/'.")
    if is_reserved(value):
        prefixes = ", ".join(repr(prefix) for prefix in RESERVED_PREFIXES)
        raise serializers.ValidationError(
            f"Execution ids starting with {prefixes} are reserved for the ids the server "
            "derives (an Idempotency-Key start, HTTP and admin writes); choose another."
        )


#: Keyword arguments ``start_workflow`` takes itself, so a workflow cannot receive them.
RESERVED_KWARGS = frozenset({"fn_or_name", "execution_id"})


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: not a string of digits, not a boolean, not a float."""

    def to_internal_value(self, data: Any) -> int:
        if not isinstance(data, int) or isinstance(data, bool):
            self.fail("invalid")
        value: int = super().to_internal_value(data)
        return value


class ExecutionStartSerializer(serializers.Serializer[Any]):
    """Start ``workflow`` with ``args`` and ``kwargs`` (durable values)."""

    workflow = serializers.CharField(max_length=MAX_KEY_LENGTH)
    args = serializers.ListField(child=serializers.JSONField(), required=False, default=list)
    kwargs = serializers.DictField(child=serializers.JSONField(), required=False, default=dict)
    execution_id = serializers.CharField(
        max_length=MAX_KEY_LENGTH,
        required=False,
        validators=[_addressable_id],
        help_text="Names the execution; starting the same id again returns it (idempotent). "
        "Ids starting with `http:` or `admin:` are reserved (`400`).",
    )
    queue = serializers.CharField(
        max_length=MAX_KEY_LENGTH,
        required=False,
        help_text="Start through this queue (`define_queue`): without a free slot the "
        "execution is `queued` until one frees.",
    )
    key = serializers.CharField(
        max_length=MAX_KEY_LENGTH,
        required=False,
        validators=[_encodable],
        help_text="The queue key its `per_key` limit counts by (needs `queue`).",
    )
    priority = StrictIntegerField(
        required=False,
        min_value=-(2**31),
        max_value=2**31 - 1,
        help_text="Higher starts first among the queue's waiting (needs `queue`).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "queue" not in attrs and ("key" in attrs or "priority" in attrs):
            raise serializers.ValidationError("`key` and `priority` need a `queue`.")
        return attrs

    def validate_kwargs(self, value: dict[str, Any]) -> dict[str, Any]:
        reserved = sorted(RESERVED_KWARGS.intersection(value))
        if reserved:
            raise serializers.ValidationError(f"Reserved keyword arguments: {reserved}.")
        return value


class ExecutionForkSerializer(serializers.Serializer[Any]):
    """Fork an execution: copy its first ``from_step`` recorded steps into a new one."""

    from_step = StrictIntegerField(
        min_value=0,
        help_text="How many recorded steps (completed or failed heap entries, in replay "
        "order) the new execution begins with: `0` starts afresh.",
    )
    execution_id = serializers.CharField(
        max_length=MAX_KEY_LENGTH,
        required=False,
        validators=[_addressable_id],
        help_text="Names the new execution; the same fork under the same id returns it "
        "(idempotent). Ids starting with `http:` or `admin:` are reserved (`400`).",
    )


class StoreRefSerializer(serializers.Serializer[Any]):
    """One store: its definition's name and its id."""

    store = serializers.CharField(help_text="The store definition's name.")
    id = serializers.CharField()


class StepTargetSerializer(serializers.Serializer[Any]):
    """What a step ran on: one of its members, by kind."""

    function = serializers.CharField(
        required=False, help_text="`run`, `atomic`: the function's `module.qualname`."
    )
    store = serializers.CharField(
        required=False,
        help_text="`take`, `take_lease`, `update`, `get`, `delete`: the store definition.",
    )
    id = serializers.CharField(required=False, help_text="With `store`: the store's id.")
    stores = StoreRefSerializer(many=True, required=False, help_text="`take_any`: its choices.")
    description = serializers.CharField(
        required=False,
        help_text="What the step names, cut short, when it cannot be read back exactly.",
    )


class WaitedStoreSerializer(StoreRefSerializer):
    """A store an execution waits on, and the step that waits."""

    step = serializers.CharField(help_text="The key of the step that waits.")


class ExecutionRunSerializer(serializers.Serializer[Any]):
    """One run: one taking of the execution's lease by a worker."""

    number = serializers.IntegerField(help_text="1 for the first run, then 2, ...")
    worker = serializers.CharField(help_text="`<host name>:<process id>` of the worker.")
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(
        allow_null=True,
        help_text="When it let the lease go; `null` while it runs, or if it never did (its "
        "worker died or lost the lease, and a later run took over).",
    )
    outcome = serializers.CharField(
        allow_null=True,
        help_text="The execution's status when the run let the lease go (`abandoned`: "
        "after an error of the runtime), or `null`.",
    )


class ExecutionStepSerializer(serializers.Serializer[Any]):
    """One heap entry of an execution."""

    key = serializers.CharField()
    position = serializers.IntegerField()
    kind = serializers.CharField()
    target = StepTargetSerializer(
        allow_null=True, help_text="What it ran on; `null` for `sleep`, `patch` and `end_lease`."
    )
    status = serializers.CharField()
    value = serializers.JSONField(allow_null=True)
    error = serializers.JSONField(allow_null=True)
    attempts = serializers.IntegerField()
    wake_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(
        help_text="When the step began, in the run that recorded it (a wait or a retry: "
        "its first run)."
    )
    recorded_at = serializers.DateTimeField(allow_null=True)


class ExecutionFieldsSerializer(serializers.Serializer[Any]):
    """The members of an execution that both its summary and its full form have."""

    id = serializers.CharField()
    workflow = serializers.CharField()
    status = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class ExecutionSerializer(ExecutionFieldsSerializer):
    """An execution with its heap steps, in replay order."""

    input = serializers.JSONField()
    result = serializers.JSONField(allow_null=True)
    error = serializers.JSONField(allow_null=True)
    waiting_on = WaitedStoreSerializer(
        many=True, help_text="The stores it waits on (`waiting`); empty otherwise."
    )
    wake_at = serializers.DateTimeField(
        allow_null=True,
        help_text="When it is due: a sleep's end, a retry, a take's timeout; `null` if none.",
    )
    runs = serializers.IntegerField(help_text="How many runs took its lease.")
    run_history = ExecutionRunSerializer(many=True, help_text="Its runs, first to last.")
    retries = serializers.IntegerField(help_text="Times it was retried (`retry/`).")
    forked_from = serializers.CharField(
        allow_null=True, help_text="The execution it was forked from (`fork/`), or `null`."
    )
    fork_step = serializers.IntegerField(
        allow_null=True, help_text="How many recorded steps of `forked_from` it began with."
    )
    queue = serializers.CharField(
        allow_null=True, help_text="The queue it was started through, or `null`."
    )
    position = serializers.IntegerField(
        allow_null=True,
        help_text="While `queued`: 1 for the next its queue admits, 2 after...; else `null`.",
    )
    # (DRF's metaclass takes declared fields off the class: no clash with ``Field.parent``)
    parent = serializers.CharField(  # type: ignore[assignment]
        allow_null=True,
        help_text="The execution that started it (`step.start`), or `null`; "
        "`GET executions/?parent=<id>` lists an execution's children.",
    )
    deadline = serializers.DateTimeField(
        allow_null=True,
        help_text="When it is cancelled with `DeadlineExceededError` if not finished, or `null`.",
    )
    steps = ExecutionStepSerializer(many=True)


class ExecutionCancelledSerializer(serializers.Serializer[Any]):
    """What a cancel answers: the execution whole (as ``ExecutionSerializer``) to a user
    who may view it, else its ``id`` and ``status`` alone."""

    id = serializers.CharField()
    status = serializers.CharField()
    workflow = serializers.CharField(required=False)
    created_at = serializers.DateTimeField(required=False)
    updated_at = serializers.DateTimeField(required=False)
    finished_at = serializers.DateTimeField(allow_null=True, required=False)
    input = serializers.JSONField(required=False)
    result = serializers.JSONField(allow_null=True, required=False)
    error = serializers.JSONField(allow_null=True, required=False)
    waiting_on = WaitedStoreSerializer(many=True, required=False)
    wake_at = serializers.DateTimeField(allow_null=True, required=False)
    runs = serializers.IntegerField(required=False)
    run_history = ExecutionRunSerializer(many=True, required=False)
    retries = serializers.IntegerField(required=False)
    forked_from = serializers.CharField(allow_null=True, required=False)
    fork_step = serializers.IntegerField(allow_null=True, required=False)
    parent = serializers.CharField(allow_null=True, required=False)  # type: ignore[assignment]
    deadline = serializers.DateTimeField(allow_null=True, required=False)
    steps = ExecutionStepSerializer(many=True, required=False)


class ExecutionSummarySerializer(ExecutionFieldsSerializer):
    """An execution in a list: no input, result or steps; ``url`` reads it whole."""

    url = serializers.URLField()


class ExecutionPageSerializer(serializers.Serializer[Any]):
    """One page of executions, newest first; ``next``/``previous`` are links or ``null``."""

    results = ExecutionSummarySerializer(many=True)
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)


class ApiRootStoreSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    url = serializers.URLField()


class ApiRootSerializer(serializers.Serializer[Any]):
    """The API root: the store definitions the user may view and the API's links."""

    stores = ApiRootStoreSerializer(many=True)
    links = serializers.DictField(child=serializers.URLField())


class QueueSerializer(serializers.Serializer[Any]):
    """A queue and what it holds now."""

    name = serializers.CharField()
    waiting = serializers.IntegerField(help_text="Executions `queued` (its depth).")
    running = serializers.IntegerField(help_text="Admitted and not finished.")
    oldest_waiting = serializers.DateTimeField(
        allow_null=True, help_text="When the longest waiting one was started."
    )
    rate_used = serializers.IntegerField(
        allow_null=True, help_text="Starts in the current rate window (`null`: no rate)."
    )
    rate_limit = serializers.IntegerField(allow_null=True)
    concurrency = serializers.IntegerField(allow_null=True)
    paused = serializers.BooleanField()
