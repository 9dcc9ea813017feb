"""A project's app with a ``django.tasks`` task and no queue model (issue #31, item 5)."""
