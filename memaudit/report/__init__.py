"""The report: the model (:mod:`.model`: Report > CaseReport > Row, Totals, PathInfo; pure data,
no torch or TE), its JSON codec (:mod:`.codec`: the strict schema and validation) and its files
(:mod:`.io`: reading inputs, checking and atomically writing outputs). Every public name of the
three is importable from here.
"""

from __future__ import annotations

from memaudit.report.codec import (
    decode_report as decode_report,
)
from memaudit.report.codec import (
    schema as schema,
)
from memaudit.report.codec import (
    short_value as short_value,
)
from memaudit.report.codec import (
    validate_case as validate_case,
)
from memaudit.report.codec import (
    validate_report as validate_report,
)
from memaudit.report.io import (
    atomic_write as atomic_write,
)
from memaudit.report.io import (
    atomic_write_bytes as atomic_write_bytes,
)
from memaudit.report.io import (
    atomic_write_text as atomic_write_text,
)
from memaudit.report.io import (
    check_depth as check_depth,
)
from memaudit.report.io import (
    check_output as check_output,
)
from memaudit.report.io import (
    check_outputs as check_outputs,
)
from memaudit.report.io import (
    load_report as load_report,
)
from memaudit.report.io import (
    read_input as read_input,
)
from memaudit.report.io import (
    write_report as write_report,
)
from memaudit.report.io import (
    write_report_streaming as write_report_streaming,
)
from memaudit.report.model import (
    DEVICE as DEVICE,
)
from memaudit.report.model import (
    KINDS as KINDS,
)
from memaudit.report.model import (
    MAX_DEPTH as MAX_DEPTH,
)
from memaudit.report.model import (
    MAX_DIM as MAX_DIM,
)
from memaudit.report.model import (
    MAX_INT as MAX_INT,
)
from memaudit.report.model import (
    OPTIONAL_ROW_KEYS as OPTIONAL_ROW_KEYS,
)
from memaudit.report.model import (
    ORIENTATIONS as ORIENTATIONS,
)
from memaudit.report.model import (
    READ_VERDICTS as READ_VERDICTS,
)
from memaudit.report.model import (
    READABLE_SCHEMAS as READABLE_SCHEMAS,
)
from memaudit.report.model import (
    RESIDES as RESIDES,
)
from memaudit.report.model import (
    ROW_DEFAULTS as ROW_DEFAULTS,
)
from memaudit.report.model import (
    SCHEMA as SCHEMA,
)
from memaudit.report.model import (
    STATUSES as STATUSES,
)
from memaudit.report.model import (
    UNREAD_CHOICES as UNREAD_CHOICES,
)
from memaudit.report.model import (
    UNREAD_METHODS as UNREAD_METHODS,
)
from memaudit.report.model import (
    VIA as VIA,
)
from memaudit.report.model import (
    CaseReport as CaseReport,
)
from memaudit.report.model import (
    Emulation as Emulation,
)
from memaudit.report.model import (
    ModuleGroup as ModuleGroup,
)
from memaudit.report.model import (
    PathInfo as PathInfo,
)
from memaudit.report.model import (
    Report as Report,
)
from memaudit.report.model import (
    Row as Row,
)
from memaudit.report.model import (
    Totals as Totals,
)
from memaudit.report.model import (
    Unread as Unread,
)
from memaudit.report.model import (
    check_module_groups as check_module_groups,
)
from memaudit.report.model import (
    compute_totals as compute_totals,
)
from memaudit.report.model import (
    gc_paused as gc_paused,
)
from memaudit.report.model import (
    group_bytes as group_bytes,
)
from memaudit.report.model import (
    make_row as make_row,
)
from memaudit.report.model import (
    module_operand as module_operand,
)
from memaudit.report.model import (
    replace_row as replace_row,
)
from memaudit.report.model import (
    row_dict as row_dict,
)
from memaudit.report.model import (
    row_dicts as row_dicts,
)
from memaudit.report.model import (
    unread_storages as unread_storages,
)
from memaudit.report.model import (
    verdict_problem as verdict_problem,
)
from memaudit.report.model import (
    with_verdicts as with_verdicts,
)
