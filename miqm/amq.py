"""AMQ message texts used by miqm, keyed by number, in MQ's wording where MQ has one.

``amq.text("AMQ7279", qmgr="QM1")`` fills the ``{qmgr}``-style fields. One table so the
error log, the console and the event history say the same thing.
"""

from __future__ import annotations

MESSAGES: dict[str, str] = {
    "AMQ5051": "The queue manager task '{task}' has started.",
    "AMQ5975": "'{qmgr}' queue manager instance '{host}' is now the active instance.",
    "AMQ6118": "An internal error was detected in the recovery log: {detail}",
    "AMQ6708": "A disk full or I/O condition was encountered when writing the log: {detail}",
    "AMQ7017": "Log not available for queue manager '{qmgr}': {detail}",
    "AMQ7048": "The queue manager name '{qmgr}' is either not valid or not known.",
    "AMQ7077": "You are not authorized to perform the requested operation.",
    "AMQ7229": "{count} log records accessed on queue manager '{qmgr}' during the log "
    "replay phase.",
    "AMQ7230": "Log replay for queue manager '{qmgr}' complete.",
    "AMQ7231": "{count} log records accessed on queue manager '{qmgr}' during the recovery phase.",
    "AMQ7232": "Transaction manager state recovered for queue manager '{qmgr}'.",
    "AMQ7233": "{count} out of {total} in-flight transactions resolved for queue manager '{qmgr}'.",
    "AMQ7234": "{count} messages from queue '{queue}' loaded on queue manager '{qmgr}'.",
    "AMQ7272": "The data for queue manager '{qmgr}' is owned by a different platform: "
    "{platform}. This instance runs on {ours}.",
    "AMQ7279": "IBM MQ queue manager '{qmgr}' lost ownership of data lock.",
    "AMQ7280": "IBM MQ queue manager '{qmgr}' appears unresponsive.",
    "AMQ7463": "The log for queue manager '{qmgr}' is full.",
    "AMQ7467": "The oldest log file required to start queue manager {qmgr} is {extent}.",
    "AMQ7468": "The oldest log file required to perform media recovery of queue manager "
    "{qmgr} is {extent}.",
    "AMQ7469": "Transactions rolled back to release log space.",
    "AMQ7880": "Error code {code} starting {qmgr} queue manager: {detail}",
    "AMQ8003": "IBM MQ queue manager '{qmgr}' started using V9.4.0.0.",
    "AMQ8004": "IBM MQ queue manager '{qmgr}' ended.",
    "AMQ8146": "IBM MQ queue manager '{qmgr}' not available.",
    "AMQ8101": "IBM MQ error ({code}) has occurred.",
    # the listener (miqm/net): authentication, TLS, protocol errors
    "AMQ5534": "User ID '{principal}' authentication failed.",
    "AMQ5540": "Application did not supply a user ID and password.",
    "AMQ9218": "The TCP/IP listener program could not bind to port {port}: {detail}",
    "AMQ9504": "A protocol error was detected: {detail}",
    "AMQ9631": "The CipherSpec negotiated during the SSL handshake does not match: {detail}",
    "AMQ9637": "Channel is lacking a certificate: {detail}",
}


def text(number: str, **fields: object) -> str:
    """The message text for ``number`` with its fields filled (missing fields shown as ?)."""
    template = MESSAGES.get(number, "{detail}")

    class _Default(dict[str, object]):
        def __missing__(self, key: str) -> str:
            return "?"

    return template.format_map(_Default(fields))
