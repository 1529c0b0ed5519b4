"""The inference runtime as installed: check it and repair it.

`doctor` says whether this runtime can run the pipeline and how to fix it;
`companions` repairs torchvision / torchaudio / torchcodec beside a `+cpu` torch;
`torchvision_cpu` is the `.pth` hook that lets torchvision's pure-Python parts
import. Import-light: the `.pth` hook runs at every interpreter start.
"""
