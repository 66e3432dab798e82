"""The one exception type users see: a single line naming the file, key or path at fault."""


class BuilderError(Exception):
    """An error the CLI prints as one line and exits 2 on; never a traceback."""

    def __init__(self, message: str, details: list[str] | None = None):
        if "\n" in message:
            message = " ".join(part.strip() for part in message.splitlines() if part.strip())
        super().__init__(message)
        self.details = list(details or [])  # printed under the one-line message (e.g. a diff)


class SpecError(BuilderError):
    """The spec file (image.yaml) or pins are invalid."""


class LockError(BuilderError):
    """The lock is missing, malformed, or the inputs drifted from it."""


class PatchError(BuilderError):
    """The patch stack cannot be applied or verified."""


class EngineError(BuilderError):
    """The Docker engine refused or failed an operation."""


class RegistryError(BuilderError):
    """A registry answered with an error or could not be reached."""


class ValidationFailed(BuilderError):
    """The smoke-test suite failed inside the image."""


class Interrupted(BaseException):
    """SIGTERM (a CI runner's cancel) or SIGINT: raised in the main thread so that every
    ``finally`` and cleanup path runs; a BaseException so that no ``except Exception`` swallows
    it."""

    def __init__(self, signum: int, name: str):
        super().__init__(f"interrupted by {name}")
        self.signum = signum
