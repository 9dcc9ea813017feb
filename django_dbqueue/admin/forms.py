"""The forms of the admin's actions and of people's outcomes, and the dates they accept.

A date the database cannot hold must be a form error, never a 500: a delay so large that
``now + delay`` overflows the database's date type (MariaDB: error 1441 or 1916) or Python's
``timedelta`` (``OverflowError``) is refused here, and so is a date in the far past (it would
make the row look like it has waited for centuries). A time "in the past" within
``PAST_ALLOWANCE`` is accepted: it simply means "due now".
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from django import forms
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..compat import UTC
from ..priorities import priority_range
from .display import when

#: The latest time every supported database (and Python's datetime) can hold, with margin.
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
#: How far in the past a date may be (a little slack for clocks and slow typing).
PAST_ALLOWANCE = timedelta(days=1)


def check_run_at(value: datetime) -> None:
    """A due time a person typed: not before yesterday, not beyond what databases hold."""
    now = timezone.now()
    if value < now - PAST_ALLOWANCE:
        raise forms.ValidationError(
            _("%(date)s is in the past. Pick a time from now on (to make items due now, use “Retry now”).")
            % {"date": when(value)},
            code="past",
        )
    if value >= LATEST:
        raise forms.ValidationError(
            _("%(date)s is too far ahead: pick a date before the year 9999.") % {"date": when(value)},
            code="too_far",
        )


def form_errors_text(form: forms.BaseForm) -> str:
    """A form's errors as sentences ("Priority: Enter a whole number."), not HTML or a list
    with field names such as ``__all__``."""
    parts = []
    for name, messages in form.errors.items():
        label = form.fields[name].label if name in form.fields else None
        for message in messages:
            parts.append(f"{label}: {message}" if label else str(message))
    return " ".join(parts)


class ActionForm(forms.Form):
    """The form of a bulk action, told the model whose rows the action changes."""

    def __init__(self, *args: Any, model: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.model = model


class PriorityForm(ActionForm):
    priority = forms.IntegerField(
        label=_("New priority"), min_value=-(2**31), max_value=2**31 - 1, help_text=_("Higher runs first.")
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.model is not None:
            # The model's own range (a django.tasks record's is -100..100): a value outside it
            # is a form error, and nothing is changed.
            low, high = priority_range(self.model)
            self.fields["priority"] = forms.IntegerField(
                label=_("New priority"), min_value=low, max_value=high, help_text=_("Higher runs first.")
            )


class RescheduleForm(ActionForm):
    UNITS = (("minutes", _("minutes")), ("hours", _("hours")), ("days", _("days")))

    run_at = forms.DateTimeField(
        label=_("Run at"),
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"),
        help_text=_("A date and time (server time zone) …"),
        validators=[check_run_at],
    )
    delay = forms.IntegerField(label=_("… or in"), required=False, min_value=0)
    unit = forms.ChoiceField(label=_("Unit"), choices=UNITS, initial="minutes", required=False)

    def clean(self) -> dict[str, Any]:
        data = cast(dict[str, Any], super().clean())  # Form.clean() returns cleaned_data
        if self.errors:
            return data
        run_at, delay = data.get("run_at"), data.get("delay")
        if run_at is None and delay is None:
            raise forms.ValidationError(_("Give a date and time, or a delay."), code="missing")
        if run_at is not None and delay is not None:
            raise forms.ValidationError(_("Give either a date and time or a delay, not both."), code="both")
        if delay is not None:
            unit = data.get("unit") or "minutes"
            try:
                delta = timedelta(**{unit: delay})
                too_far = timezone.now() + delta >= LATEST
            except OverflowError:
                too_far = True
            if too_far:
                self.add_error(
                    "delay", _("That delay is too long: the items would be due after the year 9999.")
                )
            else:
                data["delta"] = delta
        return data

    def target(self) -> datetime | timedelta:
        """A datetime or a timedelta (the delay counts from the database's clock)."""
        if self.cleaned_data.get("run_at") is not None:
            return self.cleaned_data["run_at"]
        return self.cleaned_data["delta"]


class ConfirmForm(ActionForm):
    pass


class TakeForm(forms.Form):
    n = forms.IntegerField(min_value=1)


class OutcomeForm(forms.Form):
    #: outcome: (button label, what the message says was done)
    OUTCOMES = {
        "done": (_("Done"), _("%(item)s is done.")),
        "failed": (_("Failed"), _("%(item)s is marked failed.")),
        "defer": (_("Defer"), _("%(item)s is deferred until %(until)s.")),
        "release": (_("Hand back"), _("%(item)s is handed back to the queue.")),
    }
    pk = forms.CharField()
    token = forms.IntegerField()
    outcome = forms.ChoiceField(choices=[(value, label) for value, (label, _done) in OUTCOMES.items()])
    note = forms.CharField(label=_("Why"), required=False, max_length=2000)
    defer_until = forms.DateTimeField(label=_("Defer until"), required=False, validators=[check_run_at])

    def __init__(self, *args: Any, model: type[Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.model = model

    def clean_pk(self) -> Any:
        """The pk as the model's pk field reads it: "abc" for an integer pk (or one out of its
        column's range) is a form error, not a database error in the lookup."""
        value = self.cleaned_data["pk"]
        if self.model is None:
            return value
        field = self.model._meta.pk
        value = field.to_python(value)  # ValidationError: the form reports it
        field.run_validators(value)
        return value

    def clean(self) -> dict[str, Any]:
        data = cast(dict[str, Any], super().clean())  # Form.clean() returns cleaned_data
        if (
            data.get("outcome") == "defer"
            and not data.get("defer_until")
            and "defer_until" not in self.errors
        ):
            raise forms.ValidationError(_("Deferring needs a date."))
        return data
