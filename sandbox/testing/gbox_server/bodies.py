"""The request bodies of the routes, as the SDK sends them (camelCase aliases)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_CREATE_TIMEOUT = "30s"
DEFAULT_EXPIRES_IN = "60m"
DEFAULT_COMMAND_TIMEOUT = "30s"
ALL_PHASES = ("before", "after", "trace")


class _Body(BaseModel):
    # The SDK also sends fields the fake has no use for (deprecated screenshot options, ...): ignore them.
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class CreateConfig(_Body):
    expires_in: str = Field(DEFAULT_EXPIRES_IN, alias="expiresIn")
    labels: dict[str, str] = {}
    envs: dict[str, str] = {}


class CreateBody(_Body):
    config: CreateConfig = CreateConfig()
    timeout: str = DEFAULT_CREATE_TIMEOUT
    wait: bool = True


class Point(_Body):
    x: float
    y: float


class ShotOptions(_Body):
    phases: list[Literal["before", "after", "trace"]] = list(ALL_PHASES)
    delay: str = "500ms"
    output_format: Literal["base64", "storageKey"] = Field("base64", alias="outputFormat")


class ActionOptions(_Body):
    screenshot: bool | ShotOptions | None = None


class ActionBody(_Body):
    options: ActionOptions | None = None
    include_screenshot: bool = Field(False, alias="includeScreenshot")
    output_format: Literal["base64", "storageKey"] = Field("base64", alias="outputFormat")
    screenshot_delay: str = Field("500ms", alias="screenshotDelay")


class ClickBody(ActionBody):
    x: float | None = None
    y: float | None = None
    button: Literal["left", "right", "middle"] = "left"
    double: bool = False


class MoveBody(ActionBody):
    x: float
    y: float


class DragBody(ActionBody):
    start: Point | str | None = None
    end: Point | str | None = None
    path: list[Point] | None = None


class TypeBody(ActionBody):
    text: str
    mode: Literal["append", "replace"] = "append"
    press_enter: bool = Field(False, alias="pressEnter")


class PressKeyBody(ActionBody):
    keys: list[str]
    combination: bool = False


class ScrollBody(ActionBody):
    x: float | None = None
    y: float | None = None
    scroll_x: float | None = Field(None, alias="scrollX")
    scroll_y: float | None = Field(None, alias="scrollY")
    direction: Literal["up", "down", "left", "right"] | None = None
    distance: float | Literal["tiny", "short", "medium", "long"] | None = None


class Clip(_Body):
    x: float
    y: float
    width: float
    height: float


class ScreenshotBody(_Body):
    clip: Clip | None = None
    output_format: Literal["base64", "storageKey"] = Field("base64", alias="outputFormat")


class CommandBody(_Body):
    command: str
    envs: dict[str, Any] = {}
    timeout: str = DEFAULT_COMMAND_TIMEOUT
    working_dir: str | None = Field(None, alias="workingDir")


class FaultsBody(_Body):
    create_delay_s: float | None = Field(None, ge=0)
    action_error_after: int | None = Field(None, ge=0)
