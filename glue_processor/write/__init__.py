"""Write: the batch's parts into files of about the target size."""
