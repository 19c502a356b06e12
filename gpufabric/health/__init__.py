"""``gpufabric health``: quarantine GPU nodes with a fatal fault, re-certify them once the
cause is cleared (node checks, then the bad-node sweep with proven-good partners), and
return the ones that pass. State lives in one annotation per node (:mod:`.record`);
decisions are pure (:mod:`.decide`); the API calls are in :mod:`.actions`."""
