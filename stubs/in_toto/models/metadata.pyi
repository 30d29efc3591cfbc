# The in-toto metadata container: DSSE envelopes of in-toto payloads.
from securesystemslib.dsse import Envelope as SSlibEnvelope

ENVELOPE_PAYLOAD_TYPE: str

class Metadata:
    @classmethod
    def load(cls, path: str) -> Metadata: ...

class Envelope(SSlibEnvelope, Metadata): ...
