#!/bin/sh
# Health check of a queue-manager host: healthy while this host runs the active or the
# standby instance (dspmq's STATUS(Running) or STATUS(Running as standby)).
dspmq -m "${MIQM_QMGR:-QM1}" | grep -Eq 'STATUS\((Running|Running as standby)\)$'
